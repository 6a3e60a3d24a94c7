"""One ONNX graph for a package's fitted preprocessing and model, and running it.

* scikit-learn (a Pipeline, or an estimator with ``preprocessing=``): skl2onnx converts
  the whole chain in one graph (scalers, encoders, linear models, trees, boosting...).
* torch: the module (with a softmax for a classifier) is exported by
  ``torch.onnx.export``; fitted scikit-learn preprocessing is converted by skl2onnx and
  the two graphs are joined with ``onnx.compose.merge_models``. The preprocessing stays
  the converter's (not rewritten by hand in torch), so whatever skl2onnx supports for a
  scikit-learn package it supports in front of a network too.

The graph takes the signature's columns (one ``[n, 1]`` input per column when the model
was fitted on a DataFrame, else one ``[n, k]`` float matrix, or the tensor) and answers
probabilities (labels are the signature's classes at their argmax, the native rule) or
a regression prediction. :func:`predict_onnx` needs only numpy and onnxruntime: a
server of an ONNX package imports neither torch nor scikit-learn.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any

from reprise.core.errors import UserError

__all__ = ["OPSET", "convert", "fold_scales", "make_session", "predict_onnx", "standard_scalers",
           "tidy_opsets"]

OPSET = 18
ML_OPSET = 3


def convert(pkg: Any, *, fold: bool = True) -> tuple[bytes, dict[str, Any]]:
    """The ONNX graph of ``pkg`` (bytes) and how to feed it and read it (``io``).

    ``fold``: fold scales into the following Gemm's weights (:func:`fold_scales`: not
    bit for bit the same arithmetic, so :func:`~._optimize.optimize` converts again
    without it when the folded graph fails its parity check). ``io["rewrites"]`` names
    the rewrites that changed the graph."""
    import onnx

    graph, io = _from_sklearn(pkg) if pkg.flavor == "sklearn" else _from_torch(pkg)
    model = onnx.load_from_string(graph)
    rewrites = []
    if standard_scalers(model):
        rewrites.append("scaler-as-sub-mul")
    if fold and fold_scales(model):
        rewrites.append("scale-folded-into-gemm")
    return model.SerializeToString(), {**io, "rewrites": rewrites}


def standard_scalers(model: Any) -> int:
    """Rewrite, in place, each ``ai.onnx.ml`` Scaler of ``model`` over a float tensor as a
    Sub and a Mul of the default domain; the number rewritten.

    The same float32 arithmetic, ``(x - offset) * scale`` (ONNX Runtime's Scaler kernel
    computes exactly that, and two separate operations cannot be contracted into one
    fused multiply-add), so the answers are bit for bit the same; but that kernel is a
    scalar loop, while Sub and Mul are the runtime's vectorised, threaded elementwise
    kernels: skl2onnx's StandardScaler was 40 % of the demo MLP's batch time in ONNX
    Runtime (4.9 of 12.3 ms for 50,000 rows on 2 threads); the whole graph then took 6.6
    ms where it took 9.4 (the same run).
    A Scaler over another type (it casts doubles and integers to float first), without
    both attributes or with attributes of different lengths, or a graph with subgraphs
    (If, Loop), is left as it is.
    """
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    if not any(n.op_type == "Scaler" and n.domain == "ai.onnx.ml" for n in model.graph.node) \
            or _has_subgraphs(model):
        return 0
    inferred = onnx.shape_inference.infer_shapes(model)
    elem = {v.name: v.type.tensor_type.elem_type for v in (
        *inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output)}
    graph = model.graph
    taken = {i.name for i in graph.initializer} | {
        name for n in graph.node for name in (*n.input, *n.output)} | {
        v.name for v in (*graph.input, *graph.output, *graph.value_info)}

    def fresh(base: str) -> str:
        name, k = base, 0
        while name in taken:
            k += 1
            name = f"{base}_{k}"
        taken.add(name)
        return name

    nodes, done = [], 0
    for node in model.graph.node:
        attrs = {a.name: list(a.floats) for a in node.attribute}
        if (node.op_type != "Scaler" or node.domain != "ai.onnx.ml"
                or elem.get(node.input[0]) != TensorProto.FLOAT
                or not attrs.get("offset") or not attrs.get("scale")
                # ONNX Runtime's kernel refuses lengths that differ; Sub and Mul would not
                or len(attrs["offset"]) != len(attrs["scale"])):
            nodes.append(node)
            continue
        base = node.name or node.output[0]
        offset, scale = fresh(f"{base}_offset"), fresh(f"{base}_scale")
        shifted = fresh(f"{base}_shifted")
        model.graph.initializer.extend([
            numpy_helper.from_array(np.asarray(attrs["offset"], dtype=np.float32), offset),
            numpy_helper.from_array(np.asarray(attrs["scale"], dtype=np.float32), scale)])
        nodes.append(helper.make_node("Sub", [node.input[0], offset], [shifted],
                                      name=fresh(f"{base}_sub")))
        nodes.append(helper.make_node("Mul", [shifted, scale], [node.output[0]],
                                      name=fresh(f"{base}_mul")))
        done += 1
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return done


def _has_subgraphs(model: Any) -> bool:
    """Whether a node of ``model`` holds a graph (If, Loop, Scan): names read inside one
    are not among the top-level nodes' inputs, so the rewrites leave such graphs alone."""
    from onnx import AttributeProto

    return any(a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS)
               for n in model.graph.node for a in n.attribute)


def fold_scales(model: Any) -> int:
    """Fold, in place, each per-column scale that feeds a Gemm into that Gemm's weights;
    the number folded.

    A ``Mul(t, s)`` (``s`` a float constant, one per column of ``t`` or one for all)
    whose only reader is ``Gemm(A=Mul's output, B=W)`` (``W`` a constant read by nothing
    else, ``transA=0``) becomes ``Gemm(A=t, B=W')`` with ``W'`` the rows (or columns,
    ``transB``) of ``W`` times ``s``, computed in float64 and rounded once. Then a
    StandardScaler in front of a network's first layer (a torch package's preprocessing)
    costs one elementwise pass instead of two: the Mul was ~1.4 of ~8 ms of the demo
    MLP's graph on 50,000 rows. ONNX Runtime folds only scalar scales into a MatMul
    (its MatMulScaleFusion), hence this pass. The offset is not folded into the bias:
    ``W'x + (b - W's*o)`` cancels large terms when a column's mean is large against its
    spread (a year, say), and float32 would lose the difference. Rounding differs from
    the unfolded graph by about one unit in the last place of each weight (~1e-6 on
    the MLP's probabilities), which the parity check covers.
    """
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    graph = model.graph
    if _has_subgraphs(model):
        return 0
    inits = {i.name: i for i in graph.initializer}
    # names a caller may feed or read: their constants are not changed nor removed
    outside = {v.name for v in (*graph.input, *graph.output)}
    shapes = {v.name: [d.dim_value if d.HasField("dim_value") else None
                       for d in v.type.tensor_type.shape.dim]
              for v in (*onnx.shape_inference.infer_shapes(model).graph.value_info,
                        *graph.input)}
    readers: dict[str, int] = {}
    for node in graph.node:
        for name in node.input:
            readers[name] = readers.get(name, 0) + 1
    gemms = {n.input[0]: n for n in graph.node if n.op_type == "Gemm" and n.domain in ("", "ai.onnx")}
    drop, scales, done = set(), set(), 0
    for at, node in enumerate(graph.node):
        if node.op_type != "Mul" or node.domain not in ("", "ai.onnx") or \
                node.output[0] in outside or readers.get(node.output[0]) != 1:
            continue
        gemm = gemms.get(node.output[0])
        scale_name = next((i for i in node.input if i in inits), None)
        if gemm is None or scale_name is None or len(gemm.input) < 2:
            continue
        other = [i for i in node.input if i != scale_name]
        w_init = inits.get(gemm.input[1])
        attrs = {a.name: helper.get_attribute_value(a) for a in gemm.attribute}
        if len(other) != 1 or w_init is None or readers.get(gemm.input[1]) != 1 or \
                attrs.get("transA", 0) or w_init.data_type != TensorProto.FLOAT or \
                inits[scale_name].data_type != TensorProto.FLOAT or \
                {scale_name, gemm.input[1]} & outside:
            continue
        w = numpy_helper.to_array(w_init).astype(np.float64)
        s_raw = numpy_helper.to_array(inits[scale_name]).astype(np.float64)
        if w.ndim != 2:
            continue
        k = w.shape[1] if attrs.get("transB", 0) else w.shape[0]
        # the Mul must leave its other input's shape as it is: that input [rows, k] (its
        # shape known), the scale one per column ([k] or [1, k]) or one for all
        if shapes.get(other[0], [None])[-1:] != [k] or len(shapes[other[0]]) != 2 or \
                s_raw.shape not in ((), (1,), (k,), (1, 1), (1, k)):
            continue
        s = s_raw.reshape(-1)
        s = np.broadcast_to(s, (k,))
        folded = w * (s[None, :] if attrs.get("transB", 0) else s[:, None])
        w_init.CopyFrom(numpy_helper.from_array(folded.astype(np.float32), w_init.name))
        gemm.input[0] = other[0]
        drop.add(at)  # (by position: protobuf's Python wrappers come and go, ids too)
        readers[scale_name] -= 1
        scales.add(scale_name)
        done += 1
    if done:
        kept = [n for at, n in enumerate(graph.node) if at not in drop]
        del graph.node[:]
        graph.node.extend(kept)
        for init in [i for i in graph.initializer if i.name in scales and not readers[i.name]]:
            graph.initializer.remove(init)
    return done


# -- inputs -----------------------------------------------------------------------------

def _inputs(pkg: Any) -> list[dict[str, Any]]:
    """The graph's inputs: ``{"name", "kind": column|matrix|tensor, "columns", "dtype"}``."""
    sig = pkg.signature
    if pkg.input_format == "frame" and _by_column(pkg):
        return [{"name": f.name, "kind": "column", "columns": [f.name],
                 "dtype": "string" if f.dtype == "string" else "float32"}
                for f in sig.inputs]
    if pkg.input_format == "tensor":
        return [{"name": "X", "kind": "tensor", "columns": [sig.inputs[0].name],
                 "dtype": "float32", "shape": list(sig.inputs[0].shape or ())}]
    if any(f.dtype == "string" for f in sig.inputs):
        raise UserError("an array-fitted model with text columns cannot be converted to "
                        "ONNX; fit the encoder on a DataFrame (a ColumnTransformer)")
    return [{"name": "X", "kind": "matrix", "columns": list(sig.names), "dtype": "float32"}]


def _by_column(pkg: Any) -> bool:
    """One input per column when a ColumnTransformer (or text) comes first; else the
    numeric columns as one matrix, which every skl2onnx converter takes."""
    first = pkg.preprocessing if pkg.preprocessing is not None else pkg.model
    while getattr(first, "steps", None):
        first = first.steps[0][1]
    return (type(first).__name__ == "ColumnTransformer"
            or any(f.dtype == "string" for f in pkg.signature.inputs))


def _initial_types(inputs: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    from skl2onnx.common.data_types import FloatTensorType, StringTensorType

    out: list[tuple[str, Any]] = []
    for inp in inputs:
        if inp["kind"] == "column":
            t = StringTensorType if inp["dtype"] == "string" else FloatTensorType
            out.append((inp["name"], t([None, 1])))
        elif inp["kind"] == "matrix":
            out.append((inp["name"], FloatTensorType([None, len(inp["columns"])])))
        else:
            out.append((inp["name"], FloatTensorType([None, *inp["shape"]])))
    return out


def feeds(io: dict[str, Any], columns: dict[str, Any]) -> dict[str, Any]:
    """The graph's input arrays for validated columns.

    A batch's matrix is this thread's scratch (:func:`_scratch`): read it before this
    thread's next call."""
    import numpy as np

    out: dict[str, Any] = {}
    for inp in io["inputs"]:
        if inp["kind"] == "column":
            values = columns[inp["columns"][0]]
            if inp["dtype"] == "string":
                arr = np.asarray(["" if v is None else str(v) for v in values], dtype=object)
            else:
                arr = np.asarray(values, dtype=np.float32)
            out[inp["name"]] = arr.reshape(-1, 1)
        elif inp["kind"] == "matrix":
            out[inp["name"]] = _matrix([columns[c] for c in inp["columns"]], inp["name"])
        else:
            out[inp["name"]] = np.asarray(columns[inp["columns"][0]], dtype=np.float32)
    return out


# a matrix of at least this many values is converted by all the intra-op threads at once
_SPLIT_VALUES = 1 << 18
_pool_lock = threading.Lock()
_pool: tuple[int, ThreadPoolExecutor] | None = None  # (the pid that made it, the pool)


def _matrix(cols: list[Any], name: str = "") -> Any:
    """The ``[rows, columns]`` float32 matrix of the graph's matrix input ``name``.

    Each column is converted into a row of a ``(columns, rows)`` block, then one
    transposing copy: about 3x faster than ``np.column_stack`` of the converted columns
    (its writes are strided). The transpose is most of it (0.8 of 1.1 ms for 50,000
    rows of 30 columns, in the cache); on a batch (``reprise predict``'s chunks) both
    steps are split between :func:`threads` threads, columns for the conversion and rows
    for the transpose (numpy lets the interpreter go while it copies): 0.6 ms on 2
    threads in the cache, 0.8-1.3 against 1.5-1.9 between runs of the demo MLP's graph
    (~3 ms each). A request's few rows are converted in the calling thread."""
    import numpy as np

    n = len(cols[0])
    # the size first: a request's rows never pay threads()'s system call
    parts = 1 if n * len(cols) < _SPLIT_VALUES else threads()
    if parts < 2:
        block = np.empty((len(cols), n), dtype=np.float32)
        _fill(block, cols, 0, len(cols))
        return np.ascontiguousarray(block.T)
    block, out = _scratch(name, len(cols), n)

    def convert(lo: int, hi: int) -> None:
        _fill(block, cols, lo, hi)

    def transpose(lo: int, hi: int) -> None:
        out[lo:hi] = block[:, lo:hi].T

    _split(convert, len(cols), parts)
    _split(transpose, n, parts)
    return out


def _fill(block: Any, cols: list[Any], lo: int, hi: int) -> None:
    """Rows ``lo:hi`` of ``block``: those columns, converted to its dtype."""
    for i in range(lo, hi):
        block[i] = cols[i]


_local = threading.local()


def _scratch(name: str, k: int, n: int) -> tuple[Any, Any]:
    """This thread's ``(k, n)`` block and ``(n, k)`` matrix of float32 for the graph
    input ``name`` (each input of one run its own): views of the arrays kept from its
    largest batch of ``k`` columns so far (a file's last, shorter chunk reuses them too).
    The feeds of one run are read by that run only, and a fresh pair of 6 MB arrays
    (50,000 x 30) cost ~850 page faults a batch, more time than their conversion on
    this machine (glibc maps such sizes anew every time)."""
    import numpy as np

    kept: dict[str, tuple[Any, Any]] = _local.__dict__.setdefault("scratch", {})
    held = kept.get(name)
    if held is None or held[0].shape[0] != k or held[0].shape[1] < n:
        held = kept[name] = (np.empty((k, n), dtype=np.float32),
                             np.empty((n, k), dtype=np.float32))
    return held[0][:, :n], held[1][:n]


def _split(work: Any, size: int, parts: int) -> None:
    """``work(lo, hi)`` over ``range(size)`` in ``parts`` slices, the first in this thread."""
    global _pool
    with _pool_lock:
        if _pool is None or _pool[0] != os.getpid():  # a forked child has no pool threads
            _pool = (os.getpid(), ThreadPoolExecutor(max(1, threads() - 1),
                                                     thread_name_prefix="reprise-feeds"))
        pool = _pool[1]
    bounds = [size * k // parts for k in range(parts + 1)]
    futures = [pool.submit(work, bounds[k], bounds[k + 1]) for k in range(1, parts)]
    try:
        work(bounds[0], bounds[1])
    finally:  # no slice may still write into the scratch once this returns or raises
        wait(futures)
    for f in futures:
        f.result()


# -- scikit-learn -----------------------------------------------------------------------

def _sklearn_chain(pkg: Any) -> Any:
    if pkg.preprocessing is None:
        return pkg.model
    from sklearn.pipeline import Pipeline

    return Pipeline([("preprocessing", pkg.preprocessing), ("model", pkg.model)])


def _parts(est: Any) -> list[Any]:
    """``est`` and every estimator inside it (Pipeline steps, ColumnTransformer parts)."""
    found = [est]
    for _, step in getattr(est, "steps", []) or []:
        found += _parts(step)
    for _, part, _ in getattr(est, "transformers_", []) or []:
        if not isinstance(part, str):
            found += _parts(part)
    for _, part in getattr(est, "transformer_list", []) or []:
        found += _parts(part)
    return found


def _unsupported(est: Any) -> list[str]:
    from skl2onnx._supported_operators import sklearn_operator_name_map

    containers = {"Pipeline", "ColumnTransformer", "FeatureUnion"}
    return sorted({type(p).__name__ for p in _parts(est)
                   if type(p) not in sklearn_operator_name_map
                   and type(p).__name__ not in containers})


def _from_sklearn(pkg: Any) -> tuple[bytes, dict[str, Any]]:
    graph = _sklearn_graph(pkg, _sklearn_chain(pkg), final=True)
    outputs = [o.name for o in graph.graph.output]
    if pkg.signature.task == "regression":
        io = {"prediction": outputs[0], "probabilities": None, "label": None}
    else:
        io = {"prediction": None, "label": outputs[0],
              "probabilities": outputs[1] if len(outputs) > 1 else None}
    return graph.SerializeToString(), {"inputs": _inputs(pkg), "outputs": io}


def _sklearn_graph(pkg: Any, est: Any, *, final: bool) -> Any:
    from skl2onnx import convert_sklearn

    missing = _unsupported(est)
    if missing:
        raise UserError(f"cannot convert to ONNX: skl2onnx has no converter for "
                        f"{', '.join(missing)}; the model stays servable with "
                        "--runtime native")
    options: dict[Any, Any] = {}
    last = est.steps[-1][1] if hasattr(est, "steps") else est
    if final and hasattr(last, "predict_proba"):
        options[id(last)] = {"zipmap": False}
    try:
        # named: skl2onnx names an unnamed graph with a random uuid, which made every
        # conversion's bytes (and so the variant's manifest hash) differ
        return convert_sklearn(est, name="model" if final else "preprocessing",
                               initial_types=_initial_types(_inputs(pkg)),
                               options=options, target_opset={"": OPSET,
                                                              "ai.onnx.ml": ML_OPSET})
    except Exception as exc:  # the converter's own refusal, with its reason
        raise UserError(f"cannot convert {type(est).__name__} to ONNX ({type(exc).__name__}: "
                        f"{str(exc)[:300]}); the model stays servable with --runtime native") from None


# -- torch ------------------------------------------------------------------------------

def _from_torch(pkg: Any) -> tuple[bytes, dict[str, Any]]:
    import tempfile
    import warnings
    from pathlib import Path

    import numpy as np
    import onnx
    import torch

    inputs = _inputs(pkg)
    classifier = pkg.signature.task != "regression"
    net = torch.nn.Sequential(pkg.model, torch.nn.Softmax(dim=1)) if classifier \
        else pkg.model
    if pkg.preprocessing is not None:
        from reprise.registry._predict import _inputs as native_inputs

        cols = pkg.signature.validate_records(pkg.example).columns
        width = np.asarray(pkg.preprocessing.transform(native_inputs(pkg, cols))).shape[1]
        shape = [width]
    else:
        shape = inputs[0].get("shape") or [len(inputs[0]["columns"])]
    out_name = "probabilities" if classifier else "prediction"
    was_training = pkg.model.training
    net.eval()
    try:
        with warnings.catch_warnings(), tempfile.TemporaryDirectory() as tmp:
            warnings.simplefilter("ignore")  # the TorchScript exporter: deprecated, not gone
            path = Path(tmp) / "net.onnx"
            torch.onnx.export(net, (torch.zeros(2, *shape),), path, input_names=["input"],
                              output_names=[out_name], opset_version=OPSET, dynamo=False,
                              dynamic_axes={"input": {0: "n"}, out_name: {0: "n"}})
            graph = onnx.load_from_string(path.read_bytes())
    except Exception as exc:
        raise UserError(f"torch.onnx.export cannot export {type(pkg.model).__name__} "
                        f"({type(exc).__name__}: {exc}); the model stays servable with "
                        "--runtime native") from None
    finally:
        pkg.model.train(was_training)  # the wrapper's mode would leak into the model
    if pkg.preprocessing is None:
        graph.graph.input[0].name = "X"
        for node in graph.graph.node:
            node.input[:] = ["X" if i == "input" else i for i in node.input]
    else:
        graph = _merge(pkg, graph)
        out_name = "net_" + out_name
    io = {"prediction": out_name if not classifier else None, "label": None,
          "probabilities": out_name if classifier else None}
    return graph.SerializeToString(), {"inputs": inputs, "outputs": io}


def _merge(pkg: Any, net: Any) -> Any:
    """skl2onnx's graph of the preprocessing, its output feeding the network's input."""
    from onnx import compose

    prep = _sklearn_graph(pkg, pkg.preprocessing, final=False)
    net = compose.add_prefix(net, "net_")
    net.ir_version = prep.ir_version
    merged = compose.merge_models(prep, net, io_map=[(prep.graph.output[0].name, "net_input")])
    return tidy_opsets(merged)


def tidy_opsets(model: Any) -> Any:
    """Each domain once, at its highest version, and the default domain present (graphs
    merged or made of ai.onnx.ml operators alone may lack it or list it twice, which ONNX
    Runtime's quantiser refuses)."""
    versions: dict[str, int] = {"": OPSET}
    for entry in model.opset_import:
        domain = "" if entry.domain == "ai.onnx" else entry.domain
        versions[domain] = max(versions.get(domain, 0), entry.version)
    del model.opset_import[:]
    for domain, version in sorted(versions.items()):
        model.opset_import.add(domain=domain, version=version)
    return model


# -- running ----------------------------------------------------------------------------

def threads() -> int:
    """ONNX Runtime's intra-op threads: the CPUs this process may use
    (``REPRISE_ORT_THREADS`` overrides)."""
    given = os.environ.get("REPRISE_ORT_THREADS")
    if given and given.isdigit() and int(given) > 0:
        return int(given)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def make_session(graph: bytes) -> Any:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads()
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.log_severity_level = 3
    # idle intra-op threads sleep instead of spinning: on a small machine a spinning pool
    # takes the cores that parse requests (the server) or send them (the clients)
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(graph, sess_options=opts, providers=["CPUExecutionProvider"])


def predict_onnx(pkg: Any, columns: dict[str, Any]) -> dict[str, Any]:
    """Output columns, as :func:`reprise.registry._predict.predict_columns` answers them."""
    import numpy as np

    io = pkg.onnx_info
    outs = io["outputs"]
    names = [n for n in (outs["prediction"], outs["probabilities"], outs["label"]) if n]
    got = dict(zip(names, pkg.session.run(names, feeds(io, columns)), strict=True))
    if pkg.signature.task == "regression":
        pred = np.asarray(got[outs["prediction"]])
        return {"prediction": pred.reshape(pred.shape[0], -1)[:, 0].astype(np.float64)}
    classes = np.asarray(pkg.signature.classes)
    if outs["probabilities"] is None:
        return {"prediction": np.asarray(got[outs["label"]]).reshape(-1)}
    proba = np.asarray(got[outs["probabilities"]], dtype=np.float64)
    return {"prediction": classes[proba.argmax(axis=1)], "probabilities": proba}
