"""What the notebooks use: panels that steer live runs, plots, and the course's studies.

* panels: ``panels.Panel`` (the one base), ``run_panel.RunPanel``, ``system_panels.ApexPanel`` and
  ``SeedPanel``, ``sampler_panel.SamplerPanel``;
* ``plots``: plotly figures of the course's results;
* measurements and studies: ``throughput`` (envs, inference, samplers), ``central_inference`` (SEED
  against IMPALA-style actors, ``impala_actors``), ``curves`` (learning curves, waiting for a row),
  ``pg_studies``, ``dqn_studies``, ``apex_studies``, ``seed_studies``.

The core never imports this package; it imports ipywidgets and plotly (the ``lab`` extra).
"""
