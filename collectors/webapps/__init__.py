"""Tasks on real web applications, in a format independent of MiniWoB++.

* ``taskdef``: the task format (``AppTask``): start URL, instruction template filled from a seeded
  draw of the app's data, reset, success check, step limit, allowed origins; tasks are declared in
  a YAML/JSON file (``load_tasks``), their checks and resets may be Python (``module:function``).
* ``app``: what an application provides (``WebApp``): where it listens, its data for draws, its
  control calls; the registry of applications (``register_app`` / ``get_app``).
* ``runtime``: how ``collectors.env.WebEnv`` runs such a task (reset, instruction, judging).
* ``oscar``: the shop suite, django-oscar 4.2 run as a local process (``shop/...`` tasks).

A user's own app and tasks: docs/own-app.md.
"""
