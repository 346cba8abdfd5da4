"""The shop's password hasher: PBKDF2 with fewer iterations than Django's default.

The shop's accounts are made up by the suite (customers of the seeded catalogue, the accounts the
register/login tasks type in) and live in a database on this machine only; at Django's default
(over a million iterations) one login costs seconds of CPU on a loaded 2-core machine, which
would dominate an episode.  The admin password is a random 24-character token (``admin.json``,
0600), so a cheaper hash does not make it guessable.
"""

from django.contrib.auth.hashers import PBKDF2PasswordHasher


class ShopPBKDF2PasswordHasher(PBKDF2PasswordHasher):
    iterations = 2_000
