"""Views of the suite's app: ``answer`` (agent-facing) and ``control`` (the suite's API)."""

from __future__ import annotations

import hmac
import json
import os
from pathlib import Path

from django.contrib.auth import get_user_model, login
from django.http import HttpResponseForbidden, HttpResponseNotFound, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.csrf import csrf_exempt

from collectors.webapps.oscar.control import ops

ANSWER_KEY = "dw_answer"


def answer(request):
    if request.method == "POST":
        request.session[ANSWER_KEY] = str(request.POST.get("answer", ""))[:500]
        return redirect("/answer/")
    return render(request, "dw/answer.html", {"answer": request.session.get(ANSWER_KEY)})


def _token() -> str:
    home = Path(os.environ.get("DW_SHOP_HOME", "."))
    return (home / "control_token").read_text().strip()


@csrf_exempt
def control(request, action: str):
    given = request.headers.get("X-DW-Token", "")
    if not given or not hmac.compare_digest(given, _token()):
        return HttpResponseForbidden("control token required")
    body = (
        json.loads(request.body or b"{}") if request.method == "POST" else dict(request.GET.items())
    )
    if action == "state":
        return JsonResponse(_state(request))
    if action == "login":
        user = ops.customer(body["email"], staff=bool(body.get("staff")))
        login(request, user, backend="django.contrib.auth.backends.ModelBackend")
        return JsonResponse({"ok": True, "user": user.email})
    if action == "basket_add":  # into this context's basket (the response sets its cookie)
        for upc, qty in dict(body["lines"]).items():
            request.basket.add_product(ops.Product.objects.get(upc=upc), int(qty))
        return JsonResponse({"ok": True})
    fn = ops.ACTIONS.get(action)
    if fn is None:
        return HttpResponseNotFound(f"unknown control action {action!r}")
    return JsonResponse(fn(body))


def _state(request) -> dict:
    """This browser context's state: who is logged in, its answer, its basket."""
    user = request.user if request.user.is_authenticated else None
    basket = []
    b = getattr(request, "basket", None)
    if b is not None and b.id:
        for line in b.all_lines():
            basket.append(
                {"upc": line.product.upc, "title": line.product.title, "quantity": line.quantity}
            )
    return {
        "user": None
        if user is None
        else {"email": user.email, "first_name": user.first_name, "last_name": user.last_name},
        "answer": request.session.get(ANSWER_KEY),
        "basket": basket,
        "users": get_user_model().objects.count(),
    }
