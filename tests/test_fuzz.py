"""Fuzzing the readers of untrusted input (issue 19, item 7): the LIBSVM parser, the model
loaders (our zip format and LIBLINEAR's text) and the spec loaders (job and pipeline).

Each input is a valid seed mutated a few times (byte flips, truncation, token swaps,
deletions and duplications, and tokens that have broken readers before: huge numbers,
NaN/inf, complex numbers, negative/zero/unsorted indices, unicode, control characters).
Whatever the input, the reader must return a valid result or raise the project's error
for it, never another exception, a hang or a crash.  A hang is caught twice: an alarm
ends an example that runs longer than ``EXAMPLE_SECONDS`` in Python code, and
faulthandler ends the whole run (with every thread's stack) if one cannot be interrupted
(a kernel in a loop).

Bounded for CI (a few seconds each, ``max_examples`` below); run longer locally with
``DISTSVM_FUZZ_EXAMPLES=20000 pytest tests/test_fuzz.py`` (the number of examples of each
test).  Failures are shrunk by Hypothesis to a small input; reproduce one with its
``@reproduce_failure`` blob, then add it as a case to the reader's own tests.
"""

from __future__ import annotations

import contextlib
import faulthandler
import io
import json
import os
import shutil
import signal
import tempfile
import zipfile

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from distsvm import model as mdl
from distsvm import pipeline, spec
from distsvm.storage import InputFormatError, libsvm

from .conftest import DATA

EXAMPLE_SECONDS = 5  # the per-example deadline (an alarm; generous for a loaded CI machine)
SCALE = int(os.environ.get("DISTSVM_FUZZ_EXAMPLES", "0"))
_MODEL_DIR = tempfile.mkdtemp(prefix="distsvm-fuzz-")  # the files the examples are read from


def fuzz_settings(examples: int):
    return settings(max_examples=SCALE or examples, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture])


class Hang(Exception):
    pass


@contextlib.contextmanager
def deadline(seconds: int = EXAMPLE_SECONDS):
    """Fail an example that runs longer than ``seconds``: SIGALRM interrupts Python code;
    faulthandler kills the process (dumping every stack) if the alarm cannot (a
    non-interruptible kernel), so that a hang never stalls CI."""
    def alarm(signum, frame):
        raise Hang(f"the reader ran for over {seconds}s on one input")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(seconds)
    faulthandler.dump_traceback_later(10 * seconds, exit=True)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


# ----------------------------------------------------------------- mutations

NASTY = [
    b"nan", b"NaN", b"-nan", b"inf", b"-inf", b"Infinity", b"1e309", b"-1e309", b"1e-400",
    b"1e99999", b"99999999999999999999999999", b"2147483647", b"2147483648", b"4294967296",
    b"9223372036854775808", b"-1", b"0", b"-0", b"+0", b"1j", b"1+2j", b"(1+0j)", b"0x1F",
    b"1_000", b"\xef\xbc\x91", b"\xc3\xa9", b"\xe2\x80\xa8", b"\xff\xfe", b"\x00", b"\x0b",
    b"\r", b"\n", b"\t", b" ", b"#", b":", b"::", b"1:", b":1", b"0:1", b"-1:1", b"3:1 2:1",
    b"2:1 2:1", b"qid:1", b"1e", b".", b"-", b"+", b"e5", b"1.2.3", b"[", b"]", b"{", b"}",
    b"[]", b"{}", b"null", b"true", b"false", b'"', b"'", b"&a", b"*a", b"!!binary", b"---",
    b"%", b"\\", b"w", b"label", b"bias", b"nr_class", b"nr_feature", b"solver_type",
    b"ONECLASS_SVM", b"MCSVM_CS", b"L2R_L2LOSS_SVR", b"rho", b"format_version",
]


@st.composite
def mutated(draw, seeds: list[bytes], max_mutations: int = 4) -> bytes:
    """A seed with 1..max_mutations random edits."""
    b = bytearray(draw(st.sampled_from(seeds)))
    for _ in range(draw(st.integers(1, max_mutations))):
        op = draw(st.sampled_from(["flip", "truncate", "insert", "replace", "swap", "delete",
                                   "duplicate", "bytes"]))
        n = len(b)
        pos = draw(st.integers(0, max(0, n)))
        if op == "flip" and n:
            b[min(pos, n - 1)] ^= 1 << draw(st.integers(0, 7))
        elif op == "truncate":
            del b[pos:]
        elif op == "insert":
            b[pos:pos] = draw(st.sampled_from(NASTY))
        elif op == "bytes":
            b[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        elif op in ("replace", "swap", "delete", "duplicate"):
            tokens = bytes(b).split(b" ")
            if len(tokens) < 2:
                continue
            i = draw(st.integers(0, len(tokens) - 1))
            j = draw(st.integers(0, len(tokens) - 1))
            if op == "replace":
                tokens[i] = draw(st.sampled_from(NASTY))
            elif op == "swap":
                tokens[i], tokens[j] = tokens[j], tokens[i]
            elif op == "delete":
                del tokens[i]
            else:
                tokens.insert(j, tokens[i])
            b = bytearray(b" ".join(tokens))
    return bytes(b)


# ----------------------------------------------------------------- the LIBSVM parser

def _libsvm_seeds() -> list[bytes]:
    import lzma

    a9a = lzma.decompress((DATA / "a9a.t.xz").read_bytes())[:1500]
    a9a = a9a[: a9a.rfind(b"\n") + 1]
    return [a9a,
            b"# comment\n+1 1:0.5 3:1e-3\t7:-2E+02 # trailing\r\n\n-1\n2.0 2:0 4:.25 5:1.\n-1 1:3",
            b"1 1:1\n-1 2:1\n",
            b"0.5 1:1.0000000000000000000001 2:123456789012345678901234567890e-10\n3 7:1\n"]


LIBSVM_SEEDS = _libsvm_seeds()
for _base in (0, 1):  # compile (or load) the kernels outside the examples' deadline
    libsvm.parse_chunk(LIBSVM_SEEDS[2], path="warm", chunk_offset=0, first_line=1,
                       index_base=_base)


def _check_chunk(c, n_bytes: int, index_base: int) -> None:
    """What a parse that succeeded must give: a well-formed CSR chunk."""
    n = len(c.labels)
    assert c.indptr.shape == (n + 1,) and c.indptr[0] == 0
    assert np.all(np.diff(c.indptr) >= 0) and c.indptr[-1] == len(c.indices) == len(c.data)
    assert np.all(np.isfinite(c.labels)) and np.all(np.isfinite(c.data))
    assert c.data.dtype == np.float32 and c.indices.dtype == np.int32
    if len(c.indices):
        assert c.indices.min() >= 0 and c.indices.max() == c.max_index
    for r in range(n):
        assert np.all(np.diff(c.indices[c.indptr[r]:c.indptr[r + 1]]) > 0)
    assert np.all((c.line_starts >= 0) & (c.line_starts < max(1, n_bytes)))


@fuzz_settings(400)
@given(mutated(LIBSVM_SEEDS), st.sampled_from([0, 1]))
def test_fuzz_libsvm_parser(text, index_base):
    with deadline():
        try:
            c = libsvm.parse_chunk(text, path="fuzz.svm", chunk_offset=0, first_line=1,
                                   index_base=index_base)
        except InputFormatError as e:
            assert str(e).startswith("fuzz.svm") and "\n" not in str(e)
            return
    _check_chunk(c, len(text), index_base)
    _same_as_reference(c, text, index_base)


def _same_as_reference(c, text: bytes, index_base: int) -> None:
    """A parse that succeeded gives what a plain Python reading of the text gives (each
    number by Python's ``float``, correctly rounded, then to float32): no silently wrong
    value, index or row."""
    labels, indices, data = [], [], []
    for line in text.split(b"\n"):
        tokens = line.split(b"#", 1)[0].split()
        if not tokens:
            continue
        labels.append(float(tokens[0]))
        for t in tokens[1:]:
            i, v = t.split(b":", 1)
            indices.append(int(i) - index_base)
            data.append(float(v))
    assert c.labels.tolist() == labels
    assert c.indices.tolist() == indices
    np.testing.assert_array_equal(c.data, np.array(data, dtype=np.float64).astype(np.float32))


def _compressed_seeds() -> dict[str, list[bytes]]:
    import bz2
    import gzip
    import lzma

    return {ext: [f(t) for t in LIBSVM_SEEDS]
            for ext, f in ((".gz", gzip.compress), (".bz2", bz2.compress),
                           (".xz", lzma.compress))}


COMPRESSED_SEEDS = _compressed_seeds()


@fuzz_settings(150)
@given(st.sampled_from(sorted(COMPRESSED_SEEDS)).flatmap(
    lambda ext: st.tuples(st.just(ext), mutated(COMPRESSED_SEEDS[ext], 2))))
def test_fuzz_compressed_libsvm_files(ext_content):
    """A damaged .gz/.bz2/.xz file, streamed in small pieces as an ingest reads it."""
    ext, content = ext_content
    path = os.path.join(_MODEL_DIR, f"fuzz{ext}")
    with open(path, "wb") as f:
        f.write(content)
    with deadline():
        try:
            for buf, offset, line in libsvm.iter_chunks(path, 64):
                _check_chunk(libsvm.parse_chunk(buf, path=path, chunk_offset=offset,
                                                first_line=line), offset + len(buf), 1)
        except InputFormatError as e:
            assert str(e).startswith(path) and "\n" not in str(e)


# ----------------------------------------------------------------- model loaders

def _models() -> list[mdl.Model]:
    rng = np.random.default_rng(0)
    common = dict(params={"C": 1.0}, summary={"rounds": 3})
    return [
        mdl.Model(rng.normal(size=5), 1.0, (-1.0, 1.0), "newton", "squared_hinge",
                  n_features=4, **common),
        mdl.Model(rng.normal(size=(3, 4)), -1.0, (1.0, 2.0, 3.0), "dcd", "hinge",
                  n_features=4, **common),
        mdl.Model(rng.normal(size=(3, 5)), 1.0, (0.0, 1.0, 5.0), "crammer_singer",
                  "crammer_singer", n_features=4, **common),
        mdl.Model(rng.normal(size=4), 1.0, (), "dcd", "epsilon_insensitive",
                  n_features=3, **common),
        mdl.Model(rng.normal(size=3), -1.0, (-1.0, 1.0), "oneclass", "oneclass",
                  n_features=3, rho=0.25, **common),
        mdl.Model(rng.normal(size=3), -1.0, (1.0, 2.0, 3.0), "cutting_plane", "hinge",
                  n_features=3, thresholds=(-0.5, 0.5), **common),
    ]


def _model_bytes(m: mdl.Model, liblinear: bool) -> bytes:
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "m")
        (mdl.export_liblinear if liblinear else mdl.save_model)(m, path)
        with open(path, "rb") as f:
            return f.read()


MODELS = _models()
LIBLINEAR_SEEDS = [_model_bytes(m, True) for m in MODELS if not m.is_ranking]


def _members(content: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(content)) as z:
        return {n: z.read(n) for n in z.namelist()}


OWN_MEMBERS = [_members(_model_bytes(m, False)) for m in MODELS]


def _zipped(members: dict[str, bytes]) -> bytes:
    """The zip of ``members``, the same bytes every time (a fixed date: Hypothesis replays
    an example by its draws, which must not depend on the clock)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in members.items():
            z.writestr(zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0)), data,
                       compress_type=zipfile.ZIP_DEFLATED)
    return buf.getvalue()


MODEL_PATH = os.path.join(_MODEL_DIR, "fuzz.model")


def _load(content: bytes):
    """load_model of a file of ``content``, or ModelFormatError."""
    with open(MODEL_PATH, "wb") as f:
        f.write(content)
    return mdl.load_model(MODEL_PATH)


def _check_model(model: mdl.Model) -> None:
    """A model that loads predicts finite values (and its own checks pass again)."""
    model.check(MODEL_PATH)
    X = sp.random(7, model.n_features + 2, density=0.5, random_state=0, format="csr")
    dv = model.decision_function(X)
    if model.rho is None or np.isfinite(model.rho):
        assert np.all(np.isfinite(dv))
    if not model.is_regression:
        assert set(np.asarray(model.predict(X)).tolist()) <= set(model.classes)
    # what loads, saves and loads again the same (in both formats where LIBLINEAR has it)
    again = os.path.join(_MODEL_DIR, "again.model")
    mdl.save_model(model, again)
    back = mdl.load_model(again)
    np.testing.assert_array_equal(back.w, model.w)
    assert (back.classes, back.bias, back.rho, back.thresholds) == \
        (model.classes, model.bias, model.rho, model.thresholds)
    if not model.is_ranking and mdl._liblinear_name(model.solver, model.loss) is not None:
        mdl.export_liblinear(model, again)
        back = mdl.load_model(again)
        np.testing.assert_allclose(back.w, model.w, rtol=0, atol=0)
        assert (back.classes, back.bias) == (model.classes, model.bias)


def _expect_model_error(content: bytes):
    with deadline():
        try:
            model = _load(content)
        except mdl.ModelFormatError as e:
            assert str(e).startswith(MODEL_PATH) and "\n" not in str(e)
            return
    _check_model(model)


@fuzz_settings(300)
@given(mutated(LIBLINEAR_SEEDS))
def test_fuzz_liblinear_model_import(content):
    _expect_model_error(content)


@st.composite
def own_models(draw) -> bytes:
    """A zip of our model whose members (the JSON header, the .npy weights) are mutated,
    or the zip's bytes themselves."""
    members = dict(draw(st.sampled_from(OWN_MEMBERS)))
    where = draw(st.sampled_from(["model.json", "w.npy", "zip", "members"]))
    if where in members:
        members[where] = draw(mutated([members[where]]))
    elif where == "members":
        drop = draw(st.sampled_from(sorted(members)))
        members.pop(drop) if draw(st.booleans()) else members.update(
            {drop.upper(): members[drop]})
    content = _zipped(members)
    return draw(mutated([content], 2)) if where == "zip" else content


@fuzz_settings(300)
@given(own_models())
def test_fuzz_model_load(content):
    _expect_model_error(content)


@fuzz_settings(120)
@given(st.sampled_from(OWN_MEMBERS), st.sampled_from(
    ["Infinity", "-Infinity", "NaN", "1e309", "[]", "{}", "null", "true", '"1"', "[1, 2]",
     '{"a": 1}', "-1", "0", "1e20", "99999999999999999999999", '"ONECLASS"']),
    st.sampled_from(["bias", "classes", "solver", "loss", "params", "summary", "n_features",
                     "w_shape", "thresholds", "rho", "format", "format_version", "kind"]))
def test_fuzz_model_header_values(members, value, key):
    """Each header key set to a value of another type or a non-finite number (JSON's
    ``Infinity``/``NaN``, which Python's json reads)."""
    header = json.loads(members["model.json"])
    text = json.dumps(header).replace(f'"{key}": ', f'"{key}": {value}, "_was": ', 1)
    if f'"{key}"' not in text:
        text = text[:-1] + f', "{key}": {value}}}'
    _expect_model_error(_zipped({**members, "model.json": text.encode()}))


def test_the_seeds_load():
    """Unmutated, every seed is a valid model (else the fuzzers' oracle, which accepts the
    loaders' error, would pass a loader that refuses everything)."""
    for m, content in zip([m for m in MODELS if not m.is_ranking], LIBLINEAR_SEEDS):
        got = _load(content)
        np.testing.assert_allclose(got.w, m.w, rtol=1e-15)
        assert (got.classes, got.bias, got.rho) == (m.classes, m.bias, m.rho)
    for m, members in zip(MODELS, OWN_MEMBERS):
        got = _load(_zipped(members))
        np.testing.assert_array_equal(got.w, m.w)
        assert (got.classes, got.thresholds, got.rho) == (m.classes, m.thresholds, m.rho)
    for seeds, load in ((JOB_SEEDS, spec.load_spec), (PIPELINE_SEEDS, pipeline.load_pipeline)):
        for ext, content in seeds.items():
            with tempfile.TemporaryDirectory() as d:
                path = os.path.join(d, f"seed{ext}")
                with open(path, "wb") as f:
                    f.write(content)
                assert load(path)["source"] == path
    for text in LIBSVM_SEEDS:
        libsvm.parse_chunk(text, path="seed", chunk_offset=0, first_line=1)


def test_non_finite_and_complex_models_are_refused(tmp_path):
    """The cases behind the fuzzers' oracle, named: non-finite bias, weights, labels; a
    complex weight array (np.load reads it; astype dropped the imaginary part)."""
    binary = MODELS[0]
    text = _model_bytes(binary, True).decode()
    for old, new in (("bias 1\n", "bias inf\n"), ("bias 1\n", "bias nan\n"),
                     ("label 1 -1", "label inf -1"), ("label 1 -1", "label 1 nan")):
        assert old in text
        with pytest.raises(mdl.ModelFormatError, match="fuzz.model: the (bias|class label) "
                                                       "must be a finite real number"):
            _load(text.replace(old, new, 1).encode())
    lines = text.splitlines()
    for bad in ("inf", "nan", "1j", "1+2j"):
        with pytest.raises(mdl.ModelFormatError):
            _load("\n".join(lines[:-1] + [f"{bad} "]).encode() + b"\n")
    members = OWN_MEMBERS[0]
    for bias in ("Infinity", "NaN", "-Infinity"):
        header = members["model.json"].replace(b'"bias": 1.0', f'"bias": {bias}'.encode())
        assert header != members["model.json"]
        with pytest.raises(mdl.ModelFormatError, match="bias must be a finite"):
            _load(_zipped({**members, "model.json": header}))
    buf = io.BytesIO()
    np.save(buf, binary.w.astype(np.complex128) + 1j, allow_pickle=False)
    with pytest.raises(mdl.ModelFormatError, match="dtype complex128"):
        _load(_zipped({**members, "w.npy": buf.getvalue()}))
    # and through the CLI's import: one line
    from distsvm import cli

    path = tmp_path / "inf.txt"
    path.write_text(text.replace("bias 1\n", "bias inf\n"))
    assert cli.main(["import", str(path), str(tmp_path / "m.model")]) == 1
    assert not (tmp_path / "m.model").exists()


# ----------------------------------------------------------------- spec loaders

JOB_SEEDS = {
    ".yaml": b"name: j\ndata: {train: s.zarr, test: t.zarr}\nsolver: {C: 0.5, loss: hinge, "
             b"eps: 0.01}\ncluster: {n_workers: 2}\ncheckpoint: {every: 5, keep: 2}\n"
             b"output: {model: m.model, registry: reg, name: j, promote: true}\n",
    ".json": b'{"name": "j", "data": {"train": "s.zarr"}, "solver": {"C": 0.5, "solver": '
             b'"dcd", "max_rounds": 10}, "cluster": {"scheduler": "tcp://h:8786"}}',
    ".toml": b'name = "j"\n[data]\ntrain = "s"\n[solver]\nC = 0.5\nloss = "hinge"\n'
             b'[cluster]\nn_workers = 2\n[checkpoint]\nevery = 5\n',
}
PIPELINE_SEEDS = {
    ".yaml": b"name: p\ndataset: d.zarr\npartitions: ['in/*.svm']\nholdout: h.zarr\n"
             b"registry: reg\ningest: {block_rows: 100, seed: 1}\nsolver: {C: 1}\n",
    ".json": b'{"name": "p", "dataset": "d.zarr", "partitions": "in/*.svm", "holdout": '
             b'"h.zarr", "registry": "reg", "cluster": {"n_workers": 1}}',
}


@pytest.fixture(scope="module")
def spec_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("specs")


@st.composite
def spec_files(draw, seeds: dict[str, bytes]):
    ext = draw(st.sampled_from(sorted(seeds)))
    return ext, draw(mutated([seeds[ext]]))


def _expect_spec_error(load, directory, ext: str, content: bytes):
    path = directory / f"fuzz{ext}"
    path.write_bytes(content)
    with deadline():
        try:
            doc = load(path)
        except spec.SpecError as e:
            assert str(e).startswith(str(path)) and "\n" not in str(e).strip()
            return
    assert isinstance(doc, dict) and doc["source"] == str(path)


@fuzz_settings(120)
@given(spec_files(JOB_SEEDS))
def test_fuzz_job_spec(spec_dir, file):
    _expect_spec_error(spec.load_spec, spec_dir, *file)


@fuzz_settings(100)
@given(spec_files(PIPELINE_SEEDS))
def test_fuzz_pipeline_spec(spec_dir, file):
    _expect_spec_error(pipeline.load_pipeline, spec_dir, *file)


@pytest.fixture(scope="module", autouse=True)
def _remove_model_dir():
    yield
    shutil.rmtree(_MODEL_DIR, ignore_errors=True)


@pytest.mark.parametrize("token, value", [
    (b"-999999999999999999999999991", -1e27),  # 19 significant digits overflowed int64: the
    (b"9999999999999999999", 1e19),             # fast path gave 8.4e26 (the sign lost) and
    (b"-18446744073709551617.5e-3", -18446744073709551.6175),  # other wrong values, silently
    (b"0.99999999999999999999999", 1.0),
])
def test_found_by_the_fuzzers_long_numbers(token, value):
    c = libsvm.parse_chunk(token + b" 1:" + token + b"\n", path="t", chunk_offset=0,
                           first_line=1, dtype=np.float64)
    assert c.labels.tolist() == [value] == [float(token)] and c.data.tolist() == [value]


@pytest.mark.parametrize("version", ["true", "1.0", '"1"'])
def test_found_by_the_fuzzers_format_version_is_an_integer(version):
    """``"format_version": true`` passed as version 1 (True == 1): a one-class model then
    loaded without its rho, predicting with ρ = 0, and could not be exported."""
    members = OWN_MEMBERS[4]  # the one-class model
    header = members["model.json"].replace(b'"format_version": 3', f'"format_version": '
                                           f'{version}'.encode())
    assert header != members["model.json"]
    with pytest.raises(mdl.ModelFormatError, match="model format version"):
        _load(_zipped({**members, "model.json": header}))
    m = MODELS[4]
    with pytest.raises(mdl.ModelFormatError, match="the one-class loss and a rho go together"):
        mdl.Model(m.w, m.bias, m.classes, m.solver, m.loss, {}, {}, m.n_features).check("m")
