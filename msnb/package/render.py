"""Render a HandlerSpec into the text of handler_model.py (provenance header, user code, entry point)."""

from __future__ import annotations

import json
import re
from importlib import resources

from msnb.errors import BuildError
from msnb.forms import CLASS_FORM, ROLES_FORM
from msnb.roles import ROLES
from msnb.spec import HandlerSpec
from msnb.templates.msnb_runtime.handler.names import HANDLER_MODULE, VALUES_FILE

BLOCK_MARKER = "# --- msnb: "  # starts the line before each block of user code
TEMPLATE = "handler_model.py.tmpl"  # the roles, run by the shared handler
OWN_TEMPLATE = "handler_model_own.py.tmpl"  # the user's own handler class or handle function
# Line 2 of both templates: "# model: {name}  version: {version}  spec digest: {digest}".
_PROVENANCE = re.compile(r"^# model: (?P<name>\S+)\s+version: (?P<version>\S+)\s+spec digest: (?P<digest>\w+)", re.M)


def render_handler(spec: HandlerSpec) -> str:
    """The handler_model.py source for ``spec``; it always compiles (or raises BuildError)."""
    from msnb import __version__

    own = spec.form != ROLES_FORM
    template = resources.files("msnb.templates").joinpath(OWN_TEMPLATE if own else TEMPLATE).read_text()
    text = template.format(
        msnb_version=__version__,
        origin=spec.origin,
        name=spec.name,
        version=spec.version,
        digest=spec.digest(),
        values=_values(spec),
        body=_body(spec),
        **(_own_entry(spec) if own else {"factory_args": _factory_args(spec)}),
    )
    try:
        compile(text, f"{HANDLER_MODULE}.py", "exec")
    except SyntaxError as err:  # the user code compiled alone, so this is msnb's fault
        raise BuildError(
            f"Rendered {HANDLER_MODULE}.py does not compile: {err}.",
            "this is a bug in msnb; please report it with the handler cell.",
        ) from None
    return text


def read_provenance(text: str) -> dict[str, str] | None:
    """The name, version and spec digest a rendered handler_model.py says it was built from (None: not msnb's)."""
    found = _PROVENANCE.search(text[:1000])
    return found.groupdict() if found else None


def with_version(text: str, version: str) -> str:
    """A rendered handler_model.py with its provenance line naming ``version``; nothing else of it changes."""
    found = _PROVENANCE.search(text[:1000])
    return text if found is None else text[: found.start("version")] + version + text[found.end("version") :]


def _body(spec: HandlerSpec) -> str:
    parts = []
    for block in spec.blocks:
        label = str(block.origin)
        if block.names and block is not spec.blocks[-1]:
            label += f" (pulled in: {', '.join(block.names)})"
        parts.append(f"{BLOCK_MARKER}{label} ---\n{block.source.rstrip()}\n")
    if spec.objects is not None:  # objects whose class the code above defines
        parts.append(spec.objects.render(after_code=True).rstrip())
    return "\n".join(p for p in parts if p)


def _values(spec: HandlerSpec) -> str:
    """Bind the runtime values snapshotted from the kernel before any user code runs (empty without values)."""
    objects = spec.objects.render() if spec.objects is not None else ""
    if spec.values is None:
        return objects
    names = spec.values.names
    lines = [
        f"# --- msnb: runtime values snapshotted from the kernel ({VALUES_FILE}): {', '.join(names)} ---",
        "from msnb_runtime.handler.values import load_values as _msnb_load_values",
        "",
        f"_msnb_values = _msnb_load_values(__file__, {list(names)!r})",
        *(f"{n} = _msnb_values[{n!r}]" for n in names),
        "del _msnb_values",
    ]
    return "\n".join(lines) + "\n\n" + objects


def _own_entry(spec: HandlerSpec) -> dict[str, str]:
    if spec.form == CLASS_FORM:
        return {"form": f"class {spec.entry}", "factory": "ClassEntry", "entry": spec.entry}
    return {"form": f"function {spec.entry}", "factory": "FunctionEntry", "entry": spec.entry}


def _factory_args(spec: HandlerSpec) -> str:
    lines = [f"    {spec.roles['init_function']},"]
    for role, (keyword, _) in ROLES.items():
        if role != "init_function" and role in spec.roles:
            lines.append(f"    {keyword}={spec.roles[role]},")
    if spec.init_kwargs:
        # JSON text is a valid Python literal except for true/false/null: go through repr of the parsed value.
        lines.append(f"    **{json.loads(json.dumps(spec.init_kwargs))!r},")
    return "\n".join(lines)
