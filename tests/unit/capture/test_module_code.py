"""Module-level code travels as code: a logger, a lock, a compiled pattern, threading.local() or a constant computed
by a call is rebuilt on the server by the statement that binds it; data still wins where it can travel exactly."""

from __future__ import annotations

import logging
import re
import textwrap
import threading

import pytest

from msnb.capture.cells import capture
from msnb.errors import CaptureError

# TorchServe's documented module-level conventions, as a handler file has them.
OWN = textwrap.dedent("""
    import logging
    import re
    import threading

    logger = logging.getLogger(__name__)
    lock = threading.Lock()
    WORD = re.compile(r"[a-z]+")
    local = threading.local()
    STOP = frozenset(["the", "a"])
    N_STOP = len(STOP)

    def handle(data, context):
        if data is None:
            return None
        with lock:
            local.calls = getattr(local, "calls", 0) + 1
        logger.info("batch of %d", len(data))
        return [[w for w in WORD.findall(str(row["body"])) if w not in STOP][:N_STOP] for row in data]
""")


def cells(*sources: str) -> list[tuple[str, str]]:
    return [(f"cell {i}", textwrap.dedent(src)) for i, src in enumerate(sources, 1)]


def loaded(spec) -> dict:
    namespace: dict = {"__name__": "handler_model"}
    exec(compile(spec.source, "<handler>", "exec"), namespace)
    return namespace


def test_a_file_handler_with_module_level_objects_travels_as_its_own_code_without_a_kernel():
    spec = capture("own", OWN, [])
    assert spec.values is None and spec.warnings == ()
    module = loaded(spec)
    assert isinstance(module["logger"], logging.Logger) and module["logger"].name == "handler_model"
    assert isinstance(module["WORD"], re.Pattern) and isinstance(module["local"], threading.local)
    assert module["handle"]([{"body": "the cat and a dog"}], None) == [["cat", "and"]]


def test_in_a_kernel_objects_that_cannot_be_data_are_rebuilt_and_plain_values_still_travel_as_data():
    namespace = {
        "logger": logging.getLogger("kernel"),
        "lock": threading.Lock(),
        "WORD": re.compile(r"[a-z]+"),
        "local": threading.local(),
        "STOP": frozenset(["the", "a"]),
        "N_STOP": 2,
    }
    spec = capture("own", OWN, [], namespace=namespace)
    assert spec.values is not None and spec.values.names == ("N_STOP",), "the kernel's number, exactly"
    assert "logger = logging.getLogger(__name__)" in spec.source and "N_STOP = len(STOP)" not in spec.source


def test_a_logger_from_a_cell_above_is_pulled_in_with_its_import():
    pool = cells("import logging\nlog = logging.getLogger('shared')\n")
    spec = capture("own", "def handle(data, context):\n    log.info('x')\n    return data\n", pool)
    assert "import logging" in spec.source and "log = logging.getLogger('shared')" in spec.source


@pytest.mark.parametrize(
    "pool, why",
    [
        ("import threading\nlock = threading.Lock()\nlock = make_lock()\n", "rebound later"),
        ("import collections\nseen = collections.OrderedDict()\nseen['a'] = 1\n", "changed in place later"),
        ("import torch\nclass Net(torch.nn.Module):\n    pass\nlock = Net()\n", "a notebook class: fresh weights"),
        ("import torch\nlock = torch.load('w.pt')\n", "reads a file"),
        ("class Est(object):\n    def fit(self):\n        pass\nlock = Est()\nlock.fit()\n", "used (fitted) later"),
    ],
)
def test_a_statement_that_would_not_rebuild_the_kernels_value_is_still_refused_without_a_kernel(pool, why):
    with pytest.raises(CaptureError, match="`(lock|seen)`"):
        capture("own", "def handle(data, context):\n    return [lock, seen]\n", cells(pool))


def test_a_model_in_the_kernel_is_never_rebuilt_from_code():
    pool = cells("import torch\nnet = torch.nn.Linear(2, 2)\n")
    cell = "def handle(data, context):\n    return [net]\n"
    with pytest.raises(CaptureError, match=r"`net`.*nn.Module") as err:
        capture("own", cell, pool, namespace={"net": __import__("torch").nn.Linear(2, 2)})
    assert "--checkpoint" in err.value.hint


@pytest.mark.parametrize(
    "cell, step",
    [
        ("import torch\nW = torch.load('w.pt')\ndef handle(data, context):\n    return [W]\n", "the load call of your"),
        (
            "import torch\nW = torch.load('w.pt')\nclass H:\n    def initialize(self, context):\n        pass\n"
            "    def handle(self, data, context):\n        return [W]\n",
            "your handler's initialize",
        ),
    ],
)
def test_the_refusal_hint_of_an_own_handler_names_its_load_step_not_init_function(cell, step):
    with pytest.raises(CaptureError) as err:
        capture("own", cell, [])
    assert step in err.value.hint and "init_function" not in err.value.hint


def test_a_rebuilt_statement_that_fails_on_the_server_is_shown_by_the_test_with_its_cell_before_serving():
    from msnb.errors import HandlerRunError
    from msnb.trial import runner

    pool = [("cell In[1]", "import logging\nimport os\nlogger = logging.getLogger(os.environ['MSNB_KERNEL_ONLY'])\n")]
    cell = "def handle(data, context):\n    logger.info('x')\n    return data\n"
    namespace = {"logger": logging.getLogger("kernel")}
    spec = capture("f", cell, pool, cell_origin="cell In[2]", namespace=namespace)
    with pytest.raises(HandlerRunError) as err:
        runner.validate(spec)
    assert "at `logger = logging.getLogger(os.environ['MSNB_KERNEL_ONLY'])` (from cell In[1]" in err.value.message
    assert "KeyError" in err.value.message and err.value.hint


def test_a_module_level_call_on_a_logger_a_lock_or_a_pattern_keeps_it_code_without_a_kernel():
    pool = cells(
        "import logging\nimport re\nimport threading\nlogger = logging.getLogger(__name__)\n"
        "logger.info('Transformers version %s', '5.23')\nlock = threading.Lock()\nlock.acquire()\nlock.release()\n"
        "WORD = re.compile(r'[a-z]+')\nFIRST = WORD.findall('the cat')\n"
    )
    cell = "def handle(data, context):\n    with lock:\n        logger.info('x')\n    return [WORD.findall(d) for d in data]\n"
    spec = capture("own", cell, pool)
    for line in ("logger = logging.getLogger(__name__)", "lock = threading.Lock()", "WORD = re.compile(r'[a-z]+')"):
        assert line in spec.source
    assert loaded(spec)["handle"](["the cat"], None) == [["the", "cat"]]


def test_a_module_level_call_that_may_change_a_logger_still_makes_it_a_runtime_value():
    pool = cells("import logging\nlogger = logging.getLogger(__name__)\nlogger.setLevel(logging.DEBUG)\n")
    with pytest.raises(CaptureError, match="`logger`"):
        capture("own", "def handle(data, context):\n    logger.info('x')\n    return data\n", pool)
