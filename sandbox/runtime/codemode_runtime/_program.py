"""Running one program: execute it like a notebook cell, describe its failure, encode its result.

The answer to a ``run`` request is a ``_wire.RunReply``.
"""

from __future__ import annotations

import ast
import json
import linecache
import os
import threading
import time
import traceback
from typing import Any, cast

from . import _wire as wire
from . import _workspace
from ._calls import run_state
from ._capture import Session, flush_std

_LAST = "__codemode_last_value__"
_LEFTOVER_GRACE_S = 0.05
"""How long threads started by a program may take to finish after it ends before they count as
left running."""

# Frames from files in the runtime's directory (this package and the boot script beside it) are
# plumbing: tracebacks shown to the model leave them out.
_OWN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def _cap_text(text: str, cap: int, keep_tail: bool = False) -> str:
    if len(text) <= cap:
        return text
    return "..." + text[-cap:] if keep_tail else text[:cap] + "..."


def _is_user_frame(filename: str) -> bool:
    return filename.startswith(("<program", "servers/"))


def _filter_stack(te: traceback.TracebackException, seen: set[int]) -> None:
    if id(te) in seen:
        return
    seen.add(id(te))
    kept = [
        frame
        for frame in te.stack
        if not os.path.abspath(frame.filename).startswith(_OWN_DIR)
        and not frame.filename.startswith("<frozen ")
    ]
    # Frames before the first frame of the program (asyncio's runner, threading's bootstrap) are
    # how the program was started, not what it did.
    first_user = next((i for i, frame in enumerate(kept) if _is_user_frame(frame.filename)), None)
    exc_type = getattr(te, "exc_type", None)  # deprecated in 3.13
    if first_user is None and isinstance(exc_type, type) and issubclass(exc_type, SyntaxError):
        # The program did not compile: the compiler's frames mean nothing to its author.
        first_user = len(kept)
    te.stack = traceback.StackSummary.from_list(kept[first_user or 0 :])
    for linked in (te.__cause__, te.__context__):
        if linked is not None:
            _filter_stack(linked, seen)
    inner: list[traceback.TracebackException] = getattr(te, "exceptions", None) or []
    for group_member in inner:
        _filter_stack(group_member, seen)


def _type_name(exc: BaseException) -> str:
    cls = type(exc)
    module = cls.__module__
    if module in ("builtins", "__main__"):
        return cls.__qualname__
    return f"{module}.{cls.__qualname__}"


def _describe(exc: BaseException) -> wire.ReplyError:
    try:
        message = str(exc)
    except Exception:
        message = "<the exception's message could not be produced>"
    te = traceback.TracebackException.from_exception(exc, capture_locals=False)
    _filter_stack(te, set())
    return {
        "type": _type_name(exc),
        "message": _cap_text(message, wire.ERROR_MESSAGE_CAP),
        "traceback": _cap_text("".join(te.format()), wire.TRACEBACK_CAP, keep_tail=True),
    }


def encode_value(value: Any, cap: int) -> tuple[wire.ResultKind, str | None, str | None, bool]:
    """``(result_kind, result_json, result_repr, result_truncated)`` for a program's value."""
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False)
        if wire.json_depth(value) > wire.MAX_DEPTH:
            raise ValueError("too deep")
    except (TypeError, ValueError, RecursionError):
        text = None
    if text is not None:
        data = text.encode()
        if len(data) <= cap:
            return "json", text, None, False
        return "json", None, data[:cap].decode("utf-8", errors="ignore"), True
    try:
        shown = repr(value)
    except Exception as exc:
        shown = f"<{type(value).__name__} object; repr() failed: {type(exc).__name__}>"
    data = shown.encode()
    return "repr", None, data[:cap].decode("utf-8", errors="ignore"), len(data) > cap


def _execute(code: str, filename: str, namespace: dict[str, Any]) -> Any:
    """Run ``code`` like a notebook cell; return the trailing expression's value (or None)."""
    tree = ast.parse(code, filename, "exec")
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = tree.body[-1]
        assign = ast.Assign(targets=[ast.Name(id=_LAST, ctx=ast.Store())], value=last.value)
        tree.body[-1] = ast.fix_missing_locations(ast.copy_location(assign, last))
    linecache.cache[filename] = (len(code), None, code.splitlines(keepends=True), filename)
    compiled = compile(tree, filename, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)
    namespace.pop(_LAST, None)
    if compiled.co_flags & 0x80:  # CO_COROUTINE: the program uses top-level await
        import asyncio

        asyncio.run(eval(compiled, namespace))  # noqa: S307 - running the program is the point
    else:
        exec(compiled, namespace)  # noqa: S102 - running the program is the point
    return namespace.pop(_LAST, None)


def run(session: Session, params: dict[str, Any], runtime_pid: int) -> wire.RunReply:
    """Run one program (``params`` as :class:`_wire.RunParams`, from the host) and shape its reply."""
    code = params.get("code")
    if not isinstance(code, str):
        raise ValueError("run: 'code' must be a string")
    output_cap = int(params.get("output_bytes", wire.DEFAULT_OUTPUT_BYTES))
    result_cap = int(params.get("result_bytes", wire.DEFAULT_RESULT_BYTES))
    bindings: Any = params.get("bindings") or {}
    if not isinstance(bindings, dict) or not all(
        isinstance(k, str) and k.isidentifier() for k in cast(dict[Any, Any], bindings)
    ):
        raise ValueError("run: 'bindings' must map identifiers to JSON values")
    fresh = bool(params.get("fresh"))
    if fresh:
        if session.baseline is not None:
            session.baseline.reset()  # a ResetError answers the request with an error: no run
        session.fresh_module()
    session.module.__dict__.update(cast(dict[str, Any], bindings))
    has_workspace = _workspace.prepare(params.get("workspace"))
    quota_hit = False
    session.count += 1
    filename = "<program>" if session.count == 1 else f"<program #{session.count}>"
    state = run_state()
    state.reset()
    out, err = session.out, session.err = session.begin(output_cap)
    threads_before = set(threading.enumerate())
    error: wire.ReplyError | None = None
    value: Any = None
    try:
        value = _execute(code, filename, session.module.__dict__)
    except SystemExit as exc:
        if exc.code not in (None, 0):
            error = _describe(exc)
            error["message"] = f"the program exited with status {exc.code!r}"
    except BaseException as exc:
        error = _describe(exc)
        if isinstance(exc, OSError) and _workspace.is_quota_error(exc):
            quota_hit = True
            error["message"] = _cap_text(_workspace.quota_message(exc), wire.ERROR_MESSAGE_CAP)
    finally:
        if os.getpid() != runtime_pid:
            # A child forked by the program reached the end of the program: it must not answer.
            flush_std()
            os._exit(0 if error is None else 1)
    if fresh and session.baseline is not None:
        # Before the capture ends: a killed child no longer holds its pipe open.
        session.baseline.end_of_run()
    flush_std()
    stdout, stdout_truncated = out.finish()
    stderr, stderr_truncated = err.finish()
    session.out = session.err = None
    reply: wire.RunReply = {
        "status": "ok" if error is None else "error",
        "result_kind": "stdout",
        "stdout": stdout,
        "stdout_truncated": stdout_truncated,
        "stderr": stderr,
        "stderr_truncated": stderr_truncated,
        "error": error,
    }
    if has_workspace:
        workspace = reply["workspace"] = _workspace.collect(quota_hit)
        if workspace["error"] is not None and error is None:
            error = reply["error"] = {
                "type": _workspace.QUOTA_ERROR,
                "message": workspace["error"],
                "traceback": "",
            }
            reply["status"] = "error"
    leftover = _still_running(threads_before)
    if leftover:
        reply["leftover"] = leftover
    if error is None:
        with state.lock:
            has_result, explicit = state.has_result, state.value
        if has_result or value is not None:
            kind, as_json, shown, truncated = encode_value(explicit if has_result else value, result_cap)
            reply["result_kind"] = kind
            if as_json is not None:
                reply["result_json"] = as_json
            else:
                reply["result_repr"] = shown
                reply["result_truncated"] = truncated
    return reply


def _still_running(threads_before: set[threading.Thread]) -> int:
    """Threads started during the run that have not ended, plus this process's children.

    A worker that has just handed back its last result may take a moment to exit, so each new
    thread gets a short join first. Counted, not stopped: Python cannot stop a thread, so the
    host discards the whole sandbox instead.
    """
    deadline = time.monotonic() + _LEFTOVER_GRACE_S
    started = [
        t for t in threading.enumerate() if t not in threads_before and not t.name.startswith("codemode-")
    ]
    for thread in started:
        thread.join(max(0.0, deadline - time.monotonic()))
    return sum(t.is_alive() for t in started) + _child_count()


def _child_count() -> int:
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return 0
    count = 0
    for task in tasks:
        try:
            with open(f"/proc/self/task/{task}/children", encoding="ascii") as listing:
                count += len(listing.read().split())
        except OSError:
            continue
    return count


def without_output(reply: wire.RunReply) -> wire.RunReply:
    """The reply with its captured output and result dropped, all marked truncated.

    For a reply whose capped parts still do not fit one frame (escaping can multiply their size):
    better that than no reply at all. The workspace goes too (nothing of it is then kept).
    """
    smaller = reply.copy()
    smaller["stdout"] = smaller["stderr"] = ""
    smaller["stdout_truncated"] = smaller["stderr_truncated"] = True
    if reply.get("result_json") is not None or reply.get("result_repr") is not None:
        smaller["result_json"] = None
        smaller["result_repr"] = ""
        smaller["result_truncated"] = True
    workspace = reply.get("workspace")
    if workspace is not None:
        error = (
            "the workspace did not fit one channel message with the run's reply ([sandbox] max_frame_bytes)"
        )
        smaller["workspace"] = {"files": {}, "refused": workspace["refused"], "error": error}
    return smaller
