"""The test run's Django settings: EDT's own (edtweb/settings.py) with a fast password hash.

PBKDF2 at Django's iterations costs about 0.6 s of CPU a hash on a 2-core machine, and the
suite creates and logs in users thousands of times (each live EDT creates six; each CLI,
page or API login checks one). Django's documentation recommends a fast hasher for tests.
Processes the tests start inherit ``DJANGO_SETTINGS_MODULE`` and so this module, except
where a test runs EDT as an admin configures it (tests/test_config_matrix.py runs
``edtweb.settings`` itself); tests/test_settings.py checks that EDT's own settings keep
Django's slow hash.
"""

from __future__ import annotations

from django.conf import global_settings

from edtweb.settings import *  # noqa: F403

# New passwords are hashed fast; those EDT's own settings stored still check.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher",
                    *global_settings.PASSWORD_HASHERS]  # fmt: skip
