"""Measurement that the benchmarks and the notebooks share: what each part of a system costs.

* ``throughput``: env steps, inference and samplers per second, and the limit two cores allow;
* ``baselines``: the naive reference (gymnasium's own preprocessing, one env per process);
* ``central_inference`` and ``impala_actors``: SEED's central server against IMPALA-style actors
  that each hold a model (Espeholt et al. 2020, Figure 2);
* ``seed_latency``: the server's batch and timeout against an actor's wait;
* ``seed_transports``: env steps per second through each SEED transport;
* ``learner_scaling``: data-parallel learners against their number (Stooke & Abbeel 2018, Sec. 3).

Nothing here draws a widget; a function may return a plotly figure of what it measured.
"""
