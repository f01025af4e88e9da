"""Plugins for the whole suite, unit tests and notebooks alike (``bin/test`` runs them in two
phases): which CPU ran it, and where its time went per file."""

from __future__ import annotations


def pytest_report_header(config):
    """Which CPU ran the suite: its timings and the levers recipes choose depend on it."""
    from workbench.system import machine_info

    m = machine_info()
    flags = " ".join(m.cpu_flags) or "none of note"
    caps = f", caps {' '.join(m.isa_caps)}" if m.isa_caps else ""
    return (
        f"machine: {m.cpu_model}, {m.cores} cores, {m.memory_gib} GiB; CPU flags: {flags}; "
        f"torch {m.torch} kernels: {m.torch_cpu_capability}{caps}"
    )


class FileSeconds:
    """Where the suite's time went, per test file and notebook (setup, call and teardown), printed
    after the run: the figures each CPU's suite time is cut by (``docs/long_checks.md``). A plugin
    of its own, not conftest hooks, so that it also sees the notebooks' items."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def pytest_runtest_logreport(self, report) -> None:
        path = report.nodeid.split("::")[0]
        self.seconds[path] = self.seconds.get(path, 0.0) + report.duration

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if not self.seconds:
            return
        terminalreporter.section("seconds per file")
        for path, seconds in sorted(self.seconds.items(), key=lambda item: -item[1]):
            terminalreporter.write_line(f"{seconds:8.1f} s  {path}")
        # Under pytest-xdist (bin/test's unit-test phase) the files' seconds overlap in time: their
        # sum is the workers' busy time, more than the wall time pytest states below it.
        workers = getattr(terminalreporter.config.option, "numprocesses", None)
        side_by_side = f", {workers} workers side by side" if workers else ""
        terminalreporter.write_line(f"{sum(self.seconds.values()):8.1f} s  in all{side_by_side}")
        # CI's log should say which CPU these seconds come from: the same suite takes 1.5x as
        # long on an AVX2-only EPYC as on an AVX-512 bf16 one.
        from workbench.system import machine_info

        info = machine_info()
        terminalreporter.write_line(
            f"on {info.cpu_model}, {info.cores} cores, CPU flags {' '.join(info.cpu_flags)}, "
            f"torch kernels {info.torch_cpu_capability}"
        )


def pytest_configure(config):
    # Under pytest-xdist the workers' reports reach the controller, which prints the table; a
    # worker keeps quiet.
    if not hasattr(config, "workerinput"):
        config.pluginmanager.register(FileSeconds(), "workbench-file-seconds")
