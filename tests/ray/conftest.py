"""On a failed test of the Ray cluster, the report carries what Ray's own logs say happened: replica starts, stops
and deaths from the Serve controller, every replica's stderr other than its per-request lines (nibble-serve's exit
and its signal, `_server_exited`'s message, tracebacks), and the warnings and errors of the proxies and raylets. The
cluster's logs live in a temp dir that the module's teardown removes, so this is the only record a CI run keeps."""

from __future__ import annotations

import pytest


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    rep = yield
    svc = item.funcargs.get("svc") or item.funcargs.get("two")
    if rep.failed and svc is not None and hasattr(svc, "log_excerpt"):
        try:
            rep.sections.append(("Ray's logs (excerpt)", svc.log_excerpt()))
        except Exception as e:  # noqa: BLE001 - the excerpt must not hide the failure itself
            rep.sections.append(("Ray's logs (excerpt)", f"could not read them: {e!r}"))
    return rep
