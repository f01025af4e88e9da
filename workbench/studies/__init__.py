"""The papers' studies, as the notebooks run them: each trains or measures, and returns rows.

* ``curves``: learning curves read from runs (and waiting for a run's next row);
* ``side_by_side``: a study's independent runs spread over the cores;
* ``pg_studies``, ``lr_rules``, ``noise_scale``: large-batch policy gradients (Stooke & Abbeel
  2018; McCandlish et al. 2018's gradient noise scale);
* ``dqn_studies``: the DQN family's ablations;
* ``apex_studies``: Ape-X's actors, epsilons and wall time (Horgan et al. 2018);
* ``seed_studies``, ``r2d2_studies``, ``scale_out_studies``: SEED RL and R2D2 (Espeholt et al.
  2020; Kapturowski et al. 2019);
* ``pong_studies``, ``pong_systems``: every system's Pong records, read for notebook 09.
"""
