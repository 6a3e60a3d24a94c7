"""Which candidates suit the stable version's requests (issue 14.1): the rules of
``signature_problems``, one by one."""

from __future__ import annotations

from typing import Any

from reprise.serve._candidate import signature_problems


def sig(*inputs: dict[str, Any], outputs: list[dict[str, Any]] | None = None,
        **kw: Any) -> dict[str, Any]:
    return {"inputs": list(inputs), "task": "binary", "extra_columns": "reject",
            "outputs": outputs if outputs is not None else [
                {"name": "prediction", "dtype": "int"},
                {"name": "probabilities", "dtype": "float", "shape": [2]}], **kw}


A = {"name": "a", "dtype": "float"}
B = {"name": "b", "dtype": "string"}


def test_the_same_signature_suits() -> None:
    assert signature_problems(sig(A, B), sig(B, A)) == []


def test_inputs_must_match_by_name_type_and_shape() -> None:
    assert signature_problems(sig(A, B), sig(A)) == [
        "the candidate does not take input 'b' (and refuses columns it does not know)"]
    assert signature_problems(sig(A, B), sig(A, extra_columns="ignore")) == []
    assert signature_problems(sig(A), sig(A, B)) == [
        "the candidate needs input 'b', which the stable version's requests do not carry"]
    assert signature_problems(sig(A), sig({"name": "a", "dtype": "int"})) == [
        "input 'a' is float for the stable version, int for the candidate"]
    assert signature_problems(sig({**A, "shape": [3]}), sig({**A, "shape": [4]})) == [
        "input 'a' has shape [3] for the stable version, [4] for the candidate"]


def test_nulls_the_stable_takes_the_candidate_must_take() -> None:
    assert signature_problems(sig({**A, "nullable": True}), sig(A)) == [
        "input 'a' may be null for the stable version, not for the candidate"]
    assert signature_problems(sig(A), sig({**A, "nullable": True})) == []


def test_outputs_and_task() -> None:
    three = [{"name": "prediction", "dtype": "int"},
             {"name": "probabilities", "dtype": "float", "shape": [3]}]
    assert signature_problems(sig(A), sig(A, outputs=three)) == [
        "output 'probabilities' has shape [2] for the stable version, [3] for the candidate"]
    assert signature_problems(sig(A), sig(A, outputs=three[:1])) == [
        "the candidate does not answer output 'probabilities'"]
    assert signature_problems(sig(A), sig(A, task="regression")) == [
        "the task differs: binary (stable), regression (candidate)"]
    assert signature_problems(None, None) == []
    assert signature_problems(sig(A), None) == ["one version has no signature"]
