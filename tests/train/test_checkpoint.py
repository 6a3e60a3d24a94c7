"""Checkpoint folders (atomic save, pruning, skipping damaged ones), the nested-state
flattening that keeps pickle out of them, and the RNG capture they carry."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from reprise.core.errors import UserError
from reprise.train import CheckpointManager
from reprise.train._checkpoint import capture_rng, flatten, restore_rng, unflatten


def tensors_and_state(value: float) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    return {"w": torch.full((3, 2), value), "b": torch.arange(4)}, {"value": value, "k": [1, 2]}


def json_roundtrip(obj: Any) -> Any:
    return json.loads(json.dumps(obj))


# -- folders ------------------------------------------------------------------------------


def test_save_latest_load_round_trip(tmp_path: Path) -> None:
    mgr = CheckpointManager(tmp_path / "ckpt")
    assert mgr.latest() is None and mgr.checkpoints() == []
    tensors, state = tensors_and_state(1.5)
    path = mgr.save(7, tensors, state)
    assert path.name == "ckpt-000000007"
    assert mgr.latest() == path
    loaded, loaded_state = mgr.load(path)
    assert loaded_state == state
    assert set(loaded) == {"w", "b"}
    assert torch.equal(loaded["w"], tensors["w"]) and torch.equal(loaded["b"], tensors["b"])
    assert loaded["b"].dtype == torch.int64
    assert mgr.load(path / "state.json")[1] == state  # the state file names its folder too
    assert mgr.count == 1 and mgr.seconds > 0


def test_keep_last_prunes_the_oldest(tmp_path: Path) -> None:
    mgr = CheckpointManager(tmp_path, keep_last=2)
    for step in (1, 2, 3, 4):
        mgr.save(step, *tensors_and_state(float(step)))
    assert [p.name for p in mgr.checkpoints()] == ["ckpt-000000003", "ckpt-000000004"]
    assert mgr.load(mgr.latest())[1]["value"] == 4.0  # type: ignore[arg-type]


@pytest.mark.parametrize("keep_last", [0, -1, 1.5, None])
def test_keep_last_must_be_positive(tmp_path: Path, keep_last: Any) -> None:
    with pytest.raises(UserError, match="keep_last"):
        CheckpointManager(tmp_path, keep_last=keep_last)


def truncate_tensors(path: Path) -> None:
    f = path / "tensors.safetensors"
    f.write_bytes(f.read_bytes()[:-7])


def flip_tensor_byte(path: Path) -> None:
    f = path / "tensors.safetensors"
    raw = bytearray(f.read_bytes())
    raw[-1] ^= 0xFF  # same size, different bytes: only the hash can tell
    f.write_bytes(bytes(raw))


def garble_state(path: Path) -> None:
    f = path / "state.json"
    f.write_bytes(f.read_bytes()[: len(f.read_bytes()) // 2])


def wrong_format(path: Path) -> None:
    f = path / "state.json"
    doc = json.loads(f.read_text())
    doc["format"] = 99
    f.write_text(json.dumps(doc))


def drop_tensors(path: Path) -> None:
    (path / "tensors.safetensors").unlink()


def drop_state(path: Path) -> None:
    (path / "state.json").unlink()


DAMAGE = [truncate_tensors, flip_tensor_byte, garble_state, wrong_format, drop_tensors,
          drop_state]


@pytest.mark.parametrize("damage", DAMAGE, ids=[d.__name__ for d in DAMAGE])
def test_a_damaged_newest_checkpoint_is_skipped_for_the_previous_one(
        tmp_path: Path, damage: Any, caplog: pytest.LogCaptureFixture) -> None:
    mgr = CheckpointManager(tmp_path, keep_last=3)
    older = mgr.save(1, *tensors_and_state(1.0))
    newest = mgr.save(2, *tensors_and_state(2.0))
    damage(newest)
    assert mgr.problem(newest) is not None and mgr.problem(older) is None
    assert mgr.latest() == older
    assert "skipping checkpoint" in caplog.text and newest.name in caplog.text
    with pytest.raises(UserError, match="cannot resume from"):
        mgr.load(newest)


def test_a_state_file_missing_its_tensor_record_is_skipped(tmp_path: Path) -> None:
    mgr = CheckpointManager(tmp_path)
    older = mgr.save(1, *tensors_and_state(1.0))
    newest = mgr.save(2, *tensors_and_state(2.0))
    (newest / "state.json").write_text(json.dumps({"format": 1, "step": 2}))
    assert mgr.latest() == older


def test_loading_a_missing_folder_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no such checkpoint folder"):
        CheckpointManager(tmp_path).load(tmp_path / "ckpt-000000001")


def test_a_leftover_temporary_folder_is_ignored_then_swept(tmp_path: Path) -> None:
    mgr = CheckpointManager(tmp_path)
    whole = mgr.save(1, *tensors_and_state(1.0))
    # a writer killed before its rename leaves a complete-looking temporary folder
    leftover = tmp_path / ".tmp-ckpt-000000009-4242"
    leftover.mkdir()
    for f in whole.iterdir():
        (leftover / f.name).write_bytes(f.read_bytes())
    assert mgr.checkpoints() == [whole] and mgr.latest() == whole
    mgr.save(2, *tensors_and_state(2.0))
    assert not leftover.exists()
    assert not list(tmp_path.glob(".tmp-*"))


def test_saving_the_same_step_twice_replaces_it(tmp_path: Path) -> None:
    mgr = CheckpointManager(tmp_path)
    first = mgr.save(3, *tensors_and_state(1.0))
    second = mgr.save(3, *tensors_and_state(2.0))
    assert first == second and mgr.checkpoints() == [second]
    tensors, state = mgr.load(second)
    assert state["value"] == 2.0 and torch.equal(tensors["w"], torch.full((3, 2), 2.0))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt-000000003"]  # no old/tmp left


def test_save_never_prunes_the_checkpoint_it_just_wrote(tmp_path: Path) -> None:
    mgr = CheckpointManager(tmp_path, keep_last=1)
    stale = mgr.save(4, *tensors_and_state(4.0))
    truncate_tensors(stale)  # latest() now finds nothing: training restarts from step 0
    assert mgr.latest() is None
    path = mgr.save(3, *tensors_and_state(3.0))
    assert path.is_dir()
    assert mgr.latest() == path


# -- tensors that share memory ------------------------------------------------------------


def test_tied_tensors_are_saved(tmp_path: Path) -> None:
    emb = torch.nn.Embedding(5, 3)
    head = torch.nn.Linear(3, 5, bias=False)
    head.weight = emb.weight  # weight tying: one tensor under two names
    model = torch.nn.ModuleDict({"emb": emb, "head": head})
    tensors: dict[str, torch.Tensor] = {}
    doc = flatten({"model": model.state_dict()}, tensors, "")
    path = CheckpointManager(tmp_path).save(1, tensors, doc)
    loaded, state = CheckpointManager(tmp_path).load(path)
    back = unflatten(state, loaded)["model"]
    assert set(back) == {"emb.weight", "head.weight"}
    assert torch.equal(back["emb.weight"], emb.weight) and torch.equal(back["head.weight"],
                                                                        emb.weight)


def test_views_into_one_buffer_are_saved(tmp_path: Path) -> None:
    flat = torch.arange(10.0)  # parameters flattened into one buffer, as cuDNN RNNs keep them
    path = CheckpointManager(tmp_path).save(1, {"first": flat[:4], "second": flat[4:]}, {})
    loaded, _ = CheckpointManager(tmp_path).load(path)
    assert torch.equal(loaded["first"], torch.arange(4.0))
    assert torch.equal(loaded["second"], torch.arange(4.0, 10.0))


def test_overlapping_views_are_saved(tmp_path: Path) -> None:
    base = torch.arange(6.0)
    path = CheckpointManager(tmp_path).save(1, {"all": base, "tail": base[2:]}, {})
    loaded, _ = CheckpointManager(tmp_path).load(path)
    assert torch.equal(loaded["all"], base) and torch.equal(loaded["tail"], base[2:])


# -- flatten / unflatten ------------------------------------------------------------------


def test_flatten_round_trip_of_optimizer_like_state() -> None:
    state = {
        "state": {0: {"step": torch.tensor(3.0), "exp_avg": torch.randn(2, 2)},
                  1: {"step": torch.tensor(3.0), "exp_avg": torch.randn(2)}},
        "param_groups": [{"params": [0, 1], "lr": 0.1, "betas": (0.9, 0.999), "eps": 1e-8,
                          "foreach": None, "max": math.inf, "min": -math.inf}],
        "nested": ((1, (2, 3)), [None, True, "s"]),
        "np": np.float64(2.5),
    }
    tensors: dict[str, torch.Tensor] = {}
    doc = json_roundtrip(flatten(state, tensors, "opt"))
    assert len(tensors) == 4 and all(k.startswith("opt/") for k in tensors)
    back = unflatten(doc, tensors)
    assert set(back["state"]) == {0, 1}  # int keys stay ints
    assert torch.equal(back["state"][1]["exp_avg"], state["state"][1]["exp_avg"])
    group = back["param_groups"][0]
    assert group["betas"] == (0.9, 0.999) and isinstance(group["betas"], tuple)
    assert group["max"] == math.inf and group["min"] == -math.inf and group["foreach"] is None
    assert back["nested"] == ((1, (2, 3)), [None, True, "s"])
    assert back["np"] == 2.5 and type(back["np"]) is float


def test_flatten_keeps_nan() -> None:
    back = unflatten(json_roundtrip(flatten({"x": math.nan}, {}, "")), {})
    assert math.isnan(back["x"])


def test_flatten_copies_non_contiguous_tensors() -> None:
    t = torch.arange(6.0).reshape(2, 3).T
    tensors: dict[str, torch.Tensor] = {}
    flatten({"t": t}, tensors, "")
    assert tensors["/t"].is_contiguous() and torch.equal(tensors["/t"], t)


SCALARS = (st.none() | st.booleans() | st.integers(-2**53, 2**53)
           | st.floats(allow_nan=False) | st.text(max_size=8))
PLAIN_KEYS = st.text(max_size=6).filter(lambda k: not k.startswith("$"))
JSONISH = st.recursive(
    SCALARS,
    lambda inner: (st.lists(inner, max_size=4)
                   | st.lists(inner, max_size=4).map(tuple)
                   | st.dictionaries(PLAIN_KEYS, inner, max_size=4)
                   | st.dictionaries(st.integers(-5, 50), inner, max_size=4)),
    max_leaves=20)


@settings(max_examples=150, deadline=None)
@given(JSONISH)
def test_flatten_then_json_then_unflatten_is_the_identity(obj: Any) -> None:
    tensors: dict[str, torch.Tensor] = {}
    back = unflatten(json_roundtrip(flatten(obj, tensors, "")), tensors)
    assert tensors == {}
    assert back == obj
    assert type(back) is type(obj)


@pytest.mark.parametrize("obj", [{"$tuple": [1, 2]}, {"$map": []}, {"$t": "w"}])
def test_flatten_escapes_dicts_that_look_like_its_tags(obj: dict[str, Any]) -> None:
    assert unflatten(json_roundtrip(flatten(obj, {}, "")), {}) == obj


@pytest.mark.parametrize("thing", [object(), {1, 2}, b"bytes", Path("x")])
def test_flatten_refuses_what_it_cannot_store_without_pickle(thing: Any) -> None:
    with pytest.raises(UserError, match=r"cannot checkpoint '/a/0'.*never pickle"):
        flatten({"a": [thing]}, {}, "")


def test_flatten_refuses_numpy_arrays_with_a_user_error() -> None:
    with pytest.raises(UserError, match="cannot checkpoint"):
        flatten({"a": np.arange(3)}, {}, "")


# -- random number generators -------------------------------------------------------------


def draws() -> tuple[Any, ...]:
    return (random.random(), random.gauss(0, 1), np.random.random(3).tolist(),
            float(np.random.standard_normal()), torch.rand(3).tolist(),
            torch.randn(2).tolist())


def test_capture_and_restore_rng_replay_every_stream() -> None:
    random.gauss(0, 1)  # leaves a cached second Gaussian in Python's state
    np.random.standard_normal()  # and in numpy's
    state = capture_rng()
    first = draws()
    restore_rng(state)
    assert draws() == first


def test_rng_state_survives_a_checkpoint(tmp_path: Path) -> None:
    random.gauss(0, 1)
    np.random.standard_normal()
    tensors: dict[str, torch.Tensor] = {}
    doc = flatten({"rng": capture_rng()}, tensors, "")
    first = draws()
    mgr = CheckpointManager(tmp_path)
    loaded, state = mgr.load(mgr.save(1, tensors, doc))
    draws()  # move every stream on
    restore_rng(unflatten(state, loaded)["rng"])
    assert draws() == first
