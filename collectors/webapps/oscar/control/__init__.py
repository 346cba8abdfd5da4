"""The suite's Django app inside the shop: the answer page and the control API.

``/answer/`` is part of the site the agent sees: a form that records the agent's answer to an
information-seeking question in its session.  ``/__dw/<action>`` is the control API the suite
(never the agent) calls with the secret ``X-DW-Token`` header to reset, seed and read state.
"""

from django.apps import AppConfig


class ControlConfig(AppConfig):
    name = "collectors.webapps.oscar.control"
    label = "dwcontrol"
