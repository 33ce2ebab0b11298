"""Password logins resist guessing (issue 28 item 3): after GRYVIA_LOGIN_FAILURE_LIMIT failures for a username or
from an address, the login pages refuse even the right password until the cool-off passes or an operator releases the
lock; the lock is listed in the admin."""

from __future__ import annotations

import re

import pytest
import requests
from django.core.management import call_command
from django.test import Client

from tests.factories import make_user

PASSWORD = "pw-for-tests-1"
LIMIT = 5  # GRYVIA_LOGIN_FAILURE_LIMIT, by default
CSRF = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')


def _post_login(session: requests.Session, url: str, username: str, password: str) -> requests.Response:
    page = session.get(url)
    assert page.status_code == 200, page.status_code
    form = {"csrfmiddlewaretoken": CSRF.search(page.text).group(1), "username": username, "password": password}
    next_path = re.search(r'name="next" value="([^"]*)"', page.text)
    if next_path:
        form["next"] = next_path.group(1)
    return session.post(page.url, data=form, allow_redirects=False)


@pytest.mark.parametrize(
    "entry",
    # The admin's own login page, and the page /o/authorize/ sends a signed-out person to.
    ["/admin/login/?next=/admin/", "/o/authorize/?response_type=code&client_id=any"],
    ids=["admin", "oauth"],
)
def test_thirty_wrong_passwords_lock_the_login_even_for_the_right_one(live_server, entry):
    make_user("victim", staff=True, password=PASSWORD)
    make_user("bystander", staff=True, password=PASSWORD)
    session = requests.Session()
    url = session.get(live_server.url + entry).url  # where the redirect lands: a login page
    assert "/login/" in url

    statuses = [_post_login(session, url, "victim", f"guess-{n}").status_code for n in range(30)]
    assert statuses == [200] * (LIMIT - 1) + [429] * (31 - LIMIT)

    right = _post_login(session, url, "victim", PASSWORD)
    assert right.status_code == 429 and "Sign-in locked" in right.text
    assert "sessionid" not in session.cookies  # not logged in
    # The address is locked too: another username from it waits as well.
    assert _post_login(requests.Session(), url, "bystander", PASSWORD).status_code == 429


@pytest.mark.django_db
def test_the_admin_lists_the_lock_and_the_operator_command_releases_it():
    make_user("victim", password=PASSWORD)
    guesser = Client(REMOTE_ADDR="203.0.113.7")
    for n in range(LIMIT):
        guesser.post("/accounts/login/", {"username": "victim", "password": f"guess-{n}"})
    # Locked by username: the right password from another address is refused too.
    owner = Client(REMOTE_ADDR="198.51.100.2")
    assert owner.post("/accounts/login/", {"username": "victim", "password": PASSWORD}).status_code == 429

    admin_user = make_user("operator", staff=True)
    admin_user.is_superuser = True
    admin_user.save()
    operator = Client()
    operator.force_login(admin_user)
    page = operator.get("/admin/axes/accessattempt/?locked_out=yes")
    assert page.status_code == 200
    text = page.content.decode()
    assert "victim" in text and "203.0.113.7" in text

    call_command("axes_reset_username", "victim")
    assert "victim" not in operator.get("/admin/axes/accessattempt/?locked_out=yes").content.decode()
    signed_in = owner.post("/accounts/login/", {"username": "victim", "password": PASSWORD})
    assert signed_in.status_code == 302  # to LOGIN_REDIRECT_URL: signed in


@pytest.mark.django_db
def test_a_locked_address_is_released_by_the_ip_command():
    make_user("someone", password=PASSWORD)
    guesser = Client(REMOTE_ADDR="203.0.113.9")
    for n in range(LIMIT):
        guesser.post("/accounts/login/", {"username": f"name-{n}", "password": "guess"})  # one address, many names
    assert guesser.post("/accounts/login/", {"username": "someone", "password": PASSWORD}).status_code == 429

    call_command("axes_reset_ip", "203.0.113.9")
    assert guesser.post("/accounts/login/", {"username": "someone", "password": PASSWORD}).status_code == 302
