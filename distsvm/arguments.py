"""The ``distsvm`` command's arguments: every subcommand's options, and ``train``'s from
the one declaration of the training options (:class:`distsvm.params.Params`,
:class:`~distsvm.params.Folds`) and LIBLINEAR's ``-s`` table
(:data:`distsvm.solvers.registry.TYPES`).

``train --help`` lists LIBLINEAR's own options (``-s``, ``-c``, ``-p``, ``-n``, ``-e``,
``-B``, ``-R``, ``-wi``, ``-v``, ``-C``, as its ``train``) with their help, then one line of
flags per other group (every solver's, each solver's own under its name, the cluster's);
``train --help-all`` gives every option its help.  An option of ``train`` that is not given is
absent from the parsed namespace (its default is the table's): :func:`given` returns the
options given, so that one given at its default value is still given (and refused by a
solver that does not take it).  What each command does is :mod:`distsvm.cli`'s.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import textwrap

from . import __version__, params
from .errors import message
from .progress import LOG_FORMATS
from .solvers import registry

EXIT_USAGE = 2  # a command line or spec refused (argparse's own exit status)
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")  # --log-level: Dask's messages
DESCRIPTION = ("The distsvm command: ingest | generate | columnize | info | train | predict | "
               "report | export | import | run | resume | registry | pipeline.")


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        usage_error(f"{self.prog}: {message}")


class _TrainParser(_Parser):
    """``train``'s parser: ``--help`` is LIBLINEAR's options, as its ``train`` lists them,
    and one line of flags for each other group (every solver's, each solver's own, the
    cluster's); ``--help-all`` (:class:`_HelpAll`) prints them all with their help."""

    full = False

    def format_help(self):
        if self.full:
            return super().format_help()
        shown = [g for g in self._action_groups
                 if g.title == "positional arguments" or g.title.startswith("LIBLINEAR")]
        rest = [g for g in self._action_groups if g not in shown and g._group_actions]
        groups, self._action_groups = self._action_groups, shown
        try:
            text = super().format_help()
        finally:
            self._action_groups = groups
        lines = [text.rstrip("\n"), "",
                 "more options (distsvm train --help-all: each with its help):"]
        for g in rest:
            flags = [a.option_strings[-1] if a.option_strings[-1].startswith("--")
                     else a.option_strings[0] for a in g._group_actions if a.option_strings]
            lines.append(textwrap.fill(f"{g.title.split(' (')[0].rstrip(':')}: "
                                       f"{', '.join(flags)}", 88, initial_indent="  ",
                                       subsequent_indent="      ", break_on_hyphens=False))
        return "\n".join(lines) + "\n"


class _HelpAll(argparse.Action):
    """``train --help-all``: the full help."""

    def __call__(self, parser, namespace, values, option_string=None):
        parser.full = True
        parser.print_help()
        parser.exit()


def usage_error(text: str):
    """A command line refused while it is parsed: one error line (JSON with --log-format
    json, :func:`distsvm.errors.print_error`), exit status 2 as argparse's."""
    from .errors import print_error

    print_error(text)
    sys.exit(EXIT_USAGE)


def _version(text: str) -> int:
    """A registry version number: an int >= 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"a version number is an int >= 1 (v1, v2, ...); "
                                         f"got {text!r}")
    return value


class _WeightsHelp(argparse.HelpFormatter):
    """``train --help`` with LIBLINEAR's ``-wi W`` after ``-R``: argparse cannot declare an
    option whose name holds its value (``-w1 2``); :func:`class_weights` reads it."""

    def add_arguments(self, actions):
        actions = list(actions)
        at = next((k + 1 for k, a in enumerate(actions) if a.dest == "regularize_bias"), None)
        if at is not None:  # LIBLINEAR's section
            o = params.OPTIONS["class_weight"]
            actions.insert(at, argparse.Action(list(o.flags), dest="class_weight",
                                               metavar=o.metavar, help=o.help))
        super().add_arguments(actions)


def _cluster_options(p):
    where = p.add_mutually_exclusive_group()
    where.add_argument("--scheduler", metavar="ADDRESS",
                       help="Dask scheduler address (tcp://host:port); default: an embedded "
                            "local cluster")
    where.add_argument("--scheduler-file", metavar="FILE",
                       help="the scheduler of a Dask scheduler file (as `dask scheduler "
                            "--scheduler-file FILE` writes it), as dask's tools take it")
    p.add_argument("--dashboard", action="store_true",
                   help="the embedded cluster serves Dask's dashboard on 127.0.0.1 and prints "
                        "its URL (needs bokeh: pip install 'distsvm[dashboard]')")
    p.add_argument("--workers", type=int, metavar="N",
                   help="run on N worker processes of a local cluster started for the command "
                        "(or use N workers of the --scheduler's); default: one worker whose "
                        "threads are this process's, or worker processes (one per core, at "
                        "most 4) for a store over a quarter of the machine's memory and for "
                        "train --parallel")
    tls = p.add_argument_group("TLS (a --scheduler tls://… address; as dask worker's options)")
    tls.add_argument("--tls-ca-file", metavar="FILE", help="CA certificate(s), PEM")
    tls.add_argument("--tls-cert", metavar="FILE", help="this client's certificate, PEM")
    tls.add_argument("--tls-key", metavar="FILE",
                     help="this client's private key, PEM (if not in the --tls-cert file)")


def _lock_options(p):
    p.add_argument("--lock-timeout", type=float, metavar="SECONDS",
                   help="wait up to SECONDS for another writer of the same store or registry "
                        "model to finish (default 60), then exit 4 naming it")


def _columnize_options(p):
    p.add_argument("--memory-mb", type=float, default=512.0, metavar="MB",
                   help="memory bound of each column-view build task (default 512)")




def _source_options(p):
    """train's and predict's STORE may be a data file (distsvm.sources)."""
    g = p.add_argument_group("STORE a data file (LIBSVM text, .gz/.bz2/.xz, Parquet/CSV): "
                             "ingested into FILE.zarr beside it, reused while it is unchanged")
    g.add_argument("--cache-dir", metavar="DIR",
                   help="ingest it into DIR instead (DIR/NAME-HASH.zarr)")
    g.add_argument("--label", metavar="COLUMN", help="Parquet/CSV: the label column")
    _lock_options(g)


def _date(text: str) -> str:
    """``pipeline run --ds``: a date as YYYY-MM-DD."""
    import datetime

    try:
        if len(text) == 10:
            return datetime.date.fromisoformat(text).isoformat()
    except ValueError:
        pass
    raise argparse.ArgumentTypeError(f"expected a date YYYY-MM-DD, got {text!r}")


def _storage_option(text: str) -> tuple[str, object]:
    """``KEY=VALUE`` of ``--storage-option``; VALUE is read as JSON if it parses, else a string."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def _storage_options(p):
    p.add_argument("--storage-option", dest="storage_options", type=_storage_option,
                   action="append", default=[], metavar="KEY=VALUE",
                   help="fsspec storage option for s3:// and other remote URLs, repeatable "
                        "(e.g. endpoint_url=http://host:9000, key=…, secret=…; a JSON VALUE is "
                        "decoded: 'config_kwargs={\"retries\": {\"max_attempts\": 5}}')")



def _common(p):
    p.add_argument("-q", "--quiet", action="store_true", help="no progress output")
    p.add_argument("--log-format", choices=LOG_FORMATS, default="text",
                   help="progress on stderr as text lines (default) or JSON lines: one "
                        "object per event with time, event and its fields (rounds: the "
                        "solver's round fields)")
    p.add_argument("--json", action="store_true", help="print one JSON object with the results")
    p.add_argument("--log-level", choices=LOG_LEVELS, metavar="LEVEL",
                   help="show Dask's log messages (scheduler, workers, client) of LEVEL and "
                        f"above on stderr: {', '.join(LOG_LEVELS)} (default: none; errors "
                        "are one ERROR line)")



def _compression_option(p) -> None:
    p.add_argument("--compression", choices=params.SETTINGS["compression"].values, default="lz4",
                   help="the store's codec (row blocks, column view): lz4 (default) or none "
                        "(no decoding when workers re-read the store, 1.4-3.6x the disk; "
                        "docs/storage-format.md)")


def build_parser() -> argparse.ArgumentParser:
    """The ``distsvm`` command's parser: a subcommand each, ``train``'s options from the
    tables (:func:`_train_options`)."""
    parser = _Parser(prog="distsvm", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"distsvm {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p = sub.add_parser("ingest", help="LIBSVM/svmlight text (.gz/.bz2/.xz too), Parquet or CSV "
                                       "into a dataset store")
    p.add_argument("source")
    p.add_argument("store")
    p.add_argument("--no-shuffle", action="store_true", help="keep the file's row order")
    p.add_argument("--seed", type=int, default=0, help="shuffle seed (default 0)")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--block-rows", type=int, metavar="N", help="rows per block")
    size.add_argument("--block-mb", type=float, metavar="MB",
                      help="megabytes of CSR per block (default 64)")
    p.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    _compression_option(p)
    p.add_argument("--zero-based", action="store_true", help="feature indices start at 0")
    p.add_argument("--n-features", type=int, metavar="N",
                   help="number of features (default: the largest index seen)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing store")
    p.add_argument("--append", action="store_true",
                   help="append SOURCE's rows to STORE (created if absent) as a pipeline run "
                        "does: recorded in its ledger by path and SHA-256, skipped if already "
                        "there, refused if that path was appended with other content; one "
                        "writer at a time (docs/pipeline.md)")
    p.add_argument("--weights", metavar="FILE",
                   help="instance weights, one per line in the rows' order (LIBLINEAR's -W "
                        "file), kept in the store")
    p.add_argument("--serial", action="store_true", help="parse in this process, no cluster")
    p.add_argument("--regression", action="store_true",
                   help="the labels are real-valued targets (a regression store, for -s 11, "
                        "12, 13), not classes, even where they are integers")
    p.add_argument("--columns", action="store_true",
                   help="also build the column view (as `distsvm columnize` does)")
    _lock_options(p)
    tabular = p.add_argument_group("Parquet/CSV input (a file, directory or glob; docs/tabular.md)")
    tabular.add_argument("--label", metavar="COLUMN", help="the label (target) column")
    tabular.add_argument("--features", metavar="COL,COL,...",
                         help="dense layout: the feature columns (default: all but the label)")
    tabular.add_argument("--indices", metavar="COLUMN",
                         help="sparse layout: the list column of 0-based feature indices")
    tabular.add_argument("--values", metavar="COLUMN",
                         help="sparse layout: the list column of their values")
    _columnize_options(p)
    _cluster_options(p)
    _storage_options(p)
    _common(p)

    p = sub.add_parser("columnize", help="build the CSC column view of a store (for --solver pcd)")
    p.add_argument("store")
    p.add_argument("--block-mb", type=float, default=64.0, metavar="MB",
                   help="megabytes of CSC per column block at most (default 64; the blocks "
                        "are as few as that allows, of about even size)")
    p.add_argument("--serial", action="store_true", help="run in this process, no cluster")
    _columnize_options(p)
    _cluster_options(p)
    _storage_options(p)
    _common(p)

    p = sub.add_parser("generate", help="write a synthetic text-like dataset into a store")
    p.add_argument("store")
    p.add_argument("--rows", type=int, required=True, metavar="N")
    p.add_argument("--features", type=int, required=True, metavar="M")
    p.add_argument("--nnz-per-row", type=int, required=True, metavar="K",
                   help="mean number of distinct features per row (log-normal lengths)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--zipf", type=float, default=1.0, help="Zipf exponent of feature popularity (1)")
    p.add_argument("--density", type=float, default=0.1,
                   help="share of features in the ground truth's support (0.1)")
    p.add_argument("--noise", type=float, default=0.05, help="label flip probability (0.05)")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--block-rows", type=int, metavar="N", help="rows per block")
    size.add_argument("--block-mb", type=float, metavar="MB",
                      help="megabytes of CSR per block (default 64)")
    _compression_option(p)
    p.add_argument("--overwrite", action="store_true", help="replace an existing store")
    p.add_argument("--serial", action="store_true", help="generate in this process, no cluster")
    _cluster_options(p)
    _storage_options(p)
    _common(p)

    p = sub.add_parser("info", help="print and check a store's metadata")
    p.add_argument("store")
    p.add_argument("--no-verify", action="store_true",
                   help="skip reading every block to check checksums and invariants")
    p.add_argument("--json", action="store_true", help="print the metadata as JSON")
    _storage_options(p)

    sub._parser_class = _TrainParser  # its --help: LIBLINEAR's short list (--help-all: all)
    p = sub.add_parser("train", help="train a linear classifier on a store",
                       formatter_class=_WeightsHelp,
                       usage="distsvm train [options] STORE [MODEL]  (--help-all: every option)")
    sub._parser_class = _Parser
    p.add_argument("--help-all", action=_HelpAll, nargs=0,
                   help="every option, each solver's under its name")
    p.add_argument("store")
    p.add_argument("model", nargs="?", help="where to write the model (default: STORE's name "
                   "and .model in this folder, as LIBLINEAR; not with -v or -C)")
    _train_options(p)
    _source_options(p)
    _cluster_options(p)
    _storage_options(p)
    _common(p)

    p = sub.add_parser("predict", help="predict a store with a model and report accuracy")
    p.add_argument("store")
    p.add_argument("model", help="a distsvm model or a LIBLINEAR text model")
    p.add_argument("--output", metavar="FILE",
                   help="write one predicted label (a ranking model: rank) per line; to "
                        "FILE.parquet or FILE.zarr: labels, decision values (and -b 1 "
                        "probabilities), written block by block on the workers")
    p.add_argument("--strict", action="store_true",
                   help="a model and store of different feature counts are an error "
                        "(default: a warning, and a feature only one has gets weight 0)")
    p.add_argument("-b", dest="probability", type=int, choices=(0, 1), default=0,
                   help="1: --output gets LIBLINEAR's probability format (a 'labels' header, "
                        "then label and probabilities per row); logistic models only")
    p.add_argument("output_file", nargs="?", metavar="OUTPUT",
                   help="as --output (LIBLINEAR's predict test_file model_file output_file)")
    _source_options(p)
    _cluster_options(p)
    _storage_options(p)
    _common(p)

    p = sub.add_parser("report", help="plot a training run's convergence (PNG) and summarize it")
    p.add_argument("run_dir", help="a directory written by train --run-dir")
    p.add_argument("--output", metavar="PNG",
                   help="where to write the plot (default RUN_DIR/convergence.png)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")

    p = sub.add_parser("export", help="write a model in LIBLINEAR's text format")
    p.add_argument("model")
    p.add_argument("liblinear_model")
    _storage_options(p)

    p = sub.add_parser("import", help="read a LIBLINEAR text model into distsvm's format")
    p.add_argument("liblinear_model")
    p.add_argument("model")
    _storage_options(p)

    p = sub.add_parser("run", help="run a training job spec (YAML, TOML or JSON; docs/jobs.md)")
    p.add_argument("spec")
    p.add_argument("--run-id", help="name of the run directory (default: time and a random tag)")
    _lock_options(p)
    _common(p)

    p = sub.add_parser("resume", help="continue a killed `distsvm run` from its last checkpoint")
    p.add_argument("run", help="the run directory (RUNS/RUN_ID)")
    _lock_options(p)
    _common(p)

    p = sub.add_parser("registry", help="list, show or promote models of a model registry")
    p.add_argument("action", choices=("list", "show", "promote"))
    p.add_argument("registry")
    p.add_argument("name", nargs="?", help="model name (all models for list)")
    p.add_argument("version", nargs="?", type=_version, help="version number (show, promote)")
    p.add_argument("--json", action="store_true", help="print JSON")

    p = sub.add_parser("pipeline", help="scheduled batch pipeline: ingest new partitions, "
                                        "retrain, evaluate, promote if not worse (docs/pipeline.md)")
    p.add_argument("action", choices=("run",))
    p.add_argument("spec")
    p.add_argument("--ds", type=_date, metavar="YYYY-MM-DD",
                   help="the interval's date, for {{ ds }} in the spec's strings (e.g. "
                        "partitions: /incoming/{{ ds }}/*.svm); default today (date +%%F)")
    _lock_options(p)
    _common(p)
    return parser



def class_weights(argv: list[str]) -> tuple[list[str], dict | None]:
    """LIBLINEAR's ``-wi W`` options (``-w1 2 -w-1 0.5``: label i weighs W), which argparse
    cannot declare, taken out of a ``train`` command line: (the rest, {label: weight})."""
    if not argv or argv[0] != "train":
        return argv, None
    rest, weights, k = [], {}, 0
    while k < len(argv):
        m = re.fullmatch(r"-w([-+]?[0-9.eE+-]+)", str(argv[k]))
        if m and k + 1 < len(argv):
            try:
                weights[float(m.group(1))] = float(argv[k + 1])
            except ValueError:
                usage_error(f"{argv[k]} {argv[k + 1]}: -wi takes a label i and a weight, "
                            "e.g. -w1 2")
            k += 2
        else:
            rest.append(argv[k])
            k += 1
    return rest, weights or None


def _train_options(p) -> None:
    """``train``'s options: LIBLINEAR's ``-s`` and every field of :class:`~distsvm.params.Params`
    and :class:`~distsvm.params.Folds` that has flags, in sections (LIBLINEAR's, every
    solver's, then each solver's own), each option absent when not given."""
    sections = {params.LIBLINEAR: p.add_argument_group(
                    "LIBLINEAR's options (as its train; -q is below)"),
                params.TRAINING: p.add_argument_group("training (every solver)")}
    for s in registry.SOLVERS.values():
        sections[s.name] = p.add_argument_group(f"--solver {s.cli_name}: {s.help}")
    sections[params.LIBLINEAR].add_argument(
        "-s", dest="liblinear_type", type=int, choices=list(registry.TYPES), metavar="TYPE",
        help="LIBLINEAR solver type: " + ", ".join(
            f"{code} = {registry.LOSSES[t.loss]} ({params.spelled([t.solver])[0]})"
            for code, t in registry.TYPES.items()))
    table = {**params.OPTIONS, **params.options(params.Folds)}
    defaults = {**vars(params.DEFAULTS), **vars(params.Folds())}
    order = sorted(table, key=lambda n: table[n].section != params.LIBLINEAR)  # stable
    for name in order:
        o = table[name]
        if not o.flags or name == "class_weight":  # -wi: class_weights(), _WeightsHelp
            continue
        section = o.section or next(s for s in registry.SOLVERS if s in o.takers)
        kw = dict(dest=name, default=argparse.SUPPRESS,
                  help=o.help.format(default=defaults[name]))
        if o.store is not None:
            kw["action"] = "store_const"
            kw["const"] = o.store
        else:
            kw.update(type=o.kind, metavar=o.metavar)
            choices = [v for c in o.check if isinstance(c, params.OneOf) for v in c.values
                       if v is not None]
            if choices:
                kw.update(choices=params.spelled(choices) if o.hyphens else choices,
                          metavar=o.metavar)
        sections[section].add_argument(*o.flags, **kw)
    sections[params.TRAINING].add_argument(
        "--verbose", action="store_true",
        help="multi-class (one-vs-rest): every class's round lines, [class …] (default: one "
             "line a round for all classes where they run side by side)")
    sections[params.TRAINING].add_argument(
        "--run-dir", metavar="DIR",
        help="keep a run log in DIR: rounds.jsonl (one JSON line per round) and summary.json "
             "(see `distsvm report`)")
    for s in registry.SOLVERS.values():
        if s.intercept:
            sections[s.name].add_argument(
                "--no-bias", action="store_true",
                help="no intercept (default: an unregularized intercept b, as the paper)")
    # LIBLINEAR's options first: argparse lists the groups in the order made, its general
    # "options" (-h, the cluster's, the output's) second; they go after the training ones
    p._action_groups.append(p._action_groups.pop(1))


def given(a, table=params.Params) -> dict:
    """The options of ``table`` (:class:`~distsvm.params.Params` or
    :class:`~distsvm.params.Folds`) given on the command line ``a``, by field name, their
    values as the table spells them."""
    out = {}
    for name, o in params.options(table).items():
        if hasattr(a, name):
            value = getattr(a, name)
            out[name] = value.replace("-", "_") if o.hyphens and value else value
    return out


def _exclusive(parser, argv: list[str], a) -> None:
    """Options declared ``exclusive`` (of one group): the later one given is refused, in
    argparse's words for a mutually exclusive group."""
    groups: dict = {}
    for name, o in params.OPTIONS.items():
        if o.exclusive and hasattr(a, name):
            at = max((k for k, t in enumerate(argv) if _names(t.split("=")[0], o.flags)),
                     default=len(argv))
            groups.setdefault(o.exclusive, []).append((at, o.flags[0]))
    for flags in groups.values():
        if len(flags) > 1:
            (_, first), (_, later) = sorted(flags)[:2]
            sub = next(x for x in parser._actions if isinstance(x, argparse._SubParsersAction))
            sub.choices["train"].error(f"argument {later}: not allowed with argument {first}")


def _names(token: str, flags) -> bool:
    """Whether the command line's ``token`` is one of ``flags``, a long one abbreviated too
    (as argparse takes it)."""
    return token in flags or (token.startswith("--") and len(token) > 2
                              and any(f.startswith(token) for f in flags if f[:2] == "--"))


def parse(argv: list[str]):
    """The command line ``argv`` parsed: LIBLINEAR's ``-wi`` taken out first
    (:func:`class_weights`, ``a.class_weight`` where given)."""
    argv, class_weight = class_weights(argv)
    parser = build_parser()
    a = parser.parse_args(argv)
    if a.command == "train":
        _exclusive(parser, argv, a)
        if class_weight is not None:
            a.class_weight = class_weight
    if a.command == "predict" and a.output_file is not None:  # LIBLINEAR's third argument
        if a.output is not None:
            parser.error("predict: give the output file once (OUTPUT or --output)")
        a.output = a.output_file
    return a


def flags_of(command: str) -> dict[str, str]:
    """{dest: its longest flag (a positional: its name)} of ``command``'s arguments."""
    sub = next(x for x in build_parser()._actions if isinstance(x, argparse._SubParsersAction))
    return {x.dest: max(x.option_strings, key=len) if x.option_strings else x.dest
            for x in sub.choices[command]._actions}


def storage_options(a) -> dict | None:
    """The command's storage options as a dict (None when none were given)."""
    return dict(getattr(a, "storage_options", None) or []) or None


# The outputs a command writes ({command: ((dest, a directory), ...)}): checked first.
OUTPUTS = {"ingest": (("store", True),), "generate": (("store", True),),
           "columnize": (("store", True),),
           "train": (("model", False), ("run_dir", True)), "report": (("output", False),),
           "export": (("liblinear_model", False),), "import": (("model", False),)}
# The paths (local or URLs) a command names, for --storage-option.
URLS = ("store", "source", "model", "liblinear_model", "output")


def default_model(store: str) -> str:
    """The model ``train STORE`` writes without a MODEL: LIBLINEAR's rule (train.c), the
    training file's name and ``.model`` in the current folder."""
    return os.path.basename(store.rstrip("/")) + ".model"


def check(a) -> None:
    """The command's options checked before anything is read, written or started, by the
    checks the job and pipeline specs share (:func:`distsvm.params.check_settings`,
    :func:`~distsvm.params.check_storage_options`, :func:`~distsvm.params.check_output`):
    ranges, the local cluster's size, storage options on local paths only, and the
    outputs' paths.  ValueError naming the option."""
    from .prediction import output_kind

    owner = f"distsvm {a.command}"
    flags = flags_of(a.command)
    values = {k: getattr(a, k, None) for k in params.SETTINGS if k in flags}
    params.check_settings(owner, values, flags,
                          local=not (getattr(a, "scheduler", None)
                                     or getattr(a, "scheduler_file", None)))
    params.check_storage_options(owner, flags.get("storage_options", "--storage-option"),
                                 storage_options(a), [getattr(a, k, None) for k in URLS])
    if (a.command == "train" and a.model is None
            and not (getattr(a, "find_c", False) or getattr(a, "n_folds", None))):
        a.model = default_model(a.store)  # LIBLINEAR's train FILE: FILE.model here
    outputs = OUTPUTS.get(a.command, ())
    if a.command == "predict" and a.output:
        outputs = (("output", output_kind(a.output) is not None),)
    for dest, directory in outputs:
        params.check_output(owner, flags[dest], getattr(a, dest, None), directory)
    if a.command == "generate":  # its values too: usage (exit 2), not a failure
        from .generate import check as check_generate

        check_generate(rows=a.rows, features=a.features, nnz_per_row=a.nnz_per_row,
                       seed=a.seed, zipf=a.zipf, density=a.density, noise=a.noise)
    if a.command == "registry" and a.action == "promote" and a.name:  # writes NAME/current.json
        params.check_output(owner, "registry", f"{a.registry.rstrip('/')}/{a.name}", True)


# What each path argument of a command is expected to name (for the message of an OSError).
EXPECTED = {"source": "a LIBSVM/svmlight text file, plain or .gz/.bz2/.xz",
            "store": "a dataset store directory (made by distsvm ingest)",
            "liblinear_model": "a LIBLINEAR text model file",
            "weights": "a text file of one instance weight per line",
            "spec": "a job spec file (YAML, TOML or JSON)",
            "run": "a run directory of distsvm run",
            "output": "a file to write"}
EXPECTED_MODEL = {"train": "where to write the model (a file path)",
                  "predict": "a distsvm model or a LIBLINEAR text model file",
                  "export": "a distsvm model file", "import": "where to write the model"}


def os_error(a, exc: OSError) -> str:
    """An OSError as one line: the path, what happened (not a bare errno), and what the
    command expected to find there (:data:`EXPECTED`)."""
    name = exc.filename
    if name is None or not exc.strerror:
        return message(exc)
    reason = exc.strerror[0].lower() + exc.strerror[1:]
    args = {k: v for k, v in vars(a).items() if isinstance(v, str)}
    arg = next((k for k in ("model", "liblinear_model", *args) if args.get(k) == str(name)),
               None)
    what = EXPECTED_MODEL.get(a.command) if arg == "model" else EXPECTED.get(arg)
    return f"{name}: {reason}" + (f" (expected {what})" if what else "")
