"""The notebooks' interactive parts: panels that steer live runs, figures, and watching an agent.

* panels: ``panels.Panel`` (the one base), ``run_panel.RunPanel``, ``system_panels.ApexPanel`` and
  ``SeedPanel``, ``sampler_panel.SamplerPanel``;
* ``plots``: plotly figures of the course's results;
* ``watch``: an agent playing, as frames in the notebook.

What these panels show is measured in ``workbench.measure`` and studied in ``workbench.studies``;
the core never imports this package. It imports ipywidgets and plotly (the ``lab`` extra).
"""
