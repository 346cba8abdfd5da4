"""The shop's URLs: Oscar's, plus the answer page (``/answer/``) and the control API
(``/__dw/...``, token-protected; see ``collectors.webapps.oscar.control``)."""

from django.apps import apps
from django.urls import include, path

from collectors.webapps.oscar.control import views

urlpatterns = [
    path("answer/", views.answer, name="dw-answer"),
    path("__dw/<str:action>", views.control, name="dw-control"),
    path("i18n/", include("django.conf.urls.i18n")),
    path("", include(apps.get_app_config("oscar").urls[0])),
]
