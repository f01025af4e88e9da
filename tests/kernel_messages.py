"""Run code in a real Jupyter kernel and keep every message it sent on its output channel: what a
notebook's browser (or nbval) receives, for tests that bound how much a cell sends."""

from __future__ import annotations


def run_in_kernel(
    code: str, cwd: str, *, env: dict | None = None, timeout: float = 120
) -> tuple[list[dict], str]:
    """Execute ``code`` in a fresh python3 kernel started in ``cwd``: its output messages and the
    text it printed. Fails the test when the code raised."""
    from jupyter_client.manager import start_new_kernel

    messages: list[dict] = []
    options = {} if env is None else {"env": env}  # env=None is not "inherit" to jupyter_client
    manager, client = start_new_kernel(kernel_name="python3", cwd=cwd, **options)
    try:
        reply = client.execute_interactive(code, timeout=timeout, output_hook=messages.append)
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
    assert reply["content"]["status"] == "ok", reply["content"]
    printed = "".join(m["content"].get("text", "") for m in messages if m["msg_type"] == "stream")
    return messages, printed
