"""The course's own tooling, used by notebooks, tests and ``bin/`` rather than by any system.

* ``budget``: the ``ci`` / ``full`` sizes of every notebook and test, chosen in one place;
* ``quotes``: the numbers the course's text quotes, tied to the outputs and records they describe;
* ``stored_outputs``: running a notebook and keeping what GitHub can show
  (``bin/refresh-outputs``).
"""
