"""EDT settings, read from environment variables.

Every variable read here is documented in README.md ("Configuration"); a test keeps the two
in step. Defaults suit a single machine started with `make run`.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import dj_database_url

from edtweb.env import envbool, envint, envlist, envpath, envstr
from edtweb.redis_urls import celery_options

BASE_DIR = Path(__file__).resolve().parent.parent

# Where EDT keeps its files: SQLite database, Redis append-only files, secret key, uploads.
EDT_DATA_DIR = envpath("EDT_DATA_DIR", BASE_DIR / "var")
EDT_DATA_DIR.mkdir(parents=True, exist_ok=True)


def _secret_key() -> str:
    """SECRET_KEY from the environment, else one generated once and kept in the data dir."""
    from_env = envstr("SECRET_KEY", "")
    if from_env:
        return from_env
    path = EDT_DATA_DIR / "secret_key"
    if not path.exists():
        path.touch(mode=0o600)
        path.write_text(secrets.token_urlsafe(50))
    return path.read_text().strip()


SECRET_KEY = _secret_key()
DEBUG = envbool("DEBUG", False)
ALLOWED_HOSTS = envlist("ALLOWED_HOSTS", ["127.0.0.1", "localhost"])
CSRF_TRUSTED_ORIGINS = envlist("CSRF_TRUSTED_ORIGINS", [])

# Behind TLS (a reverse proxy or a load balancer): secure cookies, HSTS, redirect to https.
EDT_HTTPS = envbool("EDT_HTTPS", False)
SECURE_SSL_REDIRECT = EDT_HTTPS
SESSION_COOKIE_SECURE = EDT_HTTPS
CSRF_COOKIE_SECURE = EDT_HTTPS
SECURE_HSTS_SECONDS = 31_536_000 if EDT_HTTPS else 0
SECURE_HSTS_INCLUDE_SUBDOMAINS = EDT_HTTPS
SECURE_HSTS_PRELOAD = EDT_HTTPS
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https") if EDT_HTTPS else None
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"

# No "daphne" app: the launcher runs daphne itself (edtweb/launcher.py), and the app would
# load Twisted and its reactor into every process that sets Django up (about 0.4 s each).
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "edtweb.core",
    "edtweb.dashboard",
    "edtweb.training",
    "edtweb.datasets",
    "edtweb.registry",
    "edtweb.tenancy",
    "edtweb.sweeps",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "edtweb.api",
]

MIDDLEWARE = [
    # First: a body too large is refused before anything reads it (edtweb/bodylimit.py).
    "edtweb.bodylimit.BoundedBody",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "edtweb.urls"
ASGI_APPLICATION = "edtweb.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "edtweb.dashboard.context.live",
                "edtweb.training.validation.bounds",
            ],
        },
    },
]


def _databases() -> dict[str, Any]:
    """SQLite in the data dir unless DATABASE_URL names another database."""
    url = envstr("DATABASE_URL", "")
    if not url:
        url = f"sqlite:///{EDT_DATA_DIR / 'edt.sqlite3'}"
    db = dj_database_url.parse(url, conn_max_age=0)
    if db["ENGINE"] == "django.db.backends.sqlite3":
        # Several processes write (web, scheduler, learners' metrics): take the write lock
        # at BEGIN, wait for it rather than fail, and let readers run beside the writer.
        db["OPTIONS"] = {
            "transaction_mode": "IMMEDIATE",
            "timeout": 30,
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        }
        # Tests' database is a file, so that the processes a test starts can share it.
        db["TEST"] = {"NAME": str(EDT_DATA_DIR / "test-edt.sqlite3")}
    return {"default": db}


DATABASES = _databases()
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "login"
# Failed logins with one username (the login page, the API's token, WMLA's Basic
# credentials) allowed within a window of this many seconds; past them, 429 until it ends
# (edtweb/throttle.py). 0 failures: no limit.
EDT_LOGIN_FAILURES = envint("EDT_LOGIN_FAILURES", 10)
EDT_LOGIN_WINDOW = envint("EDT_LOGIN_WINDOW", 300)
LOGIN_REDIRECT_URL = "cluster"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = envstr("TIME_ZONE", "UTC")
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
# No CDN: EDT works offline. The pages use plotly.js's basic bundle (scatter, bar, pie:
# 1.2 MB; static/vendor/plotly-basic, from npm's plotly.js-basic-dist-min v4.1.1); a sweep's
# page its gl2d bundle, for the parallel coordinates (parcoords and scatter: 1.6 MB;
# static/vendor/plotly-gl2d, from npm's plotly.js-gl2d-dist-min v3.7.0, its latest).
STATICFILES_DIRS = [BASE_DIR / "static"]
# `collectstatic` (the launcher runs it when a source file changed) fills it.
STATIC_ROOT = envpath("EDT_STATIC_ROOT", EDT_DATA_DIR / "staticfiles")
STATIC_ROOT.mkdir(parents=True, exist_ok=True)
# Collected, every file has a content hash in its name (cached for a year) and gzip/brotli
# copies WhiteNoise sends to browsers that accept them (plotly-basic.min.js: 1.2 MB -> 0.4 MB).
# A name missing from the manifest falls back to the source file (manifest_strict off).
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "edtweb.staticstorage.CompressedStaticStorage"},
}
# Until `collectstatic` has run (tests, a first `manage.py runserver`), serve straight from
# the source folders, uncompressed.
WHITENOISE_USE_FINDERS = DEBUG or not (STATIC_ROOT / "staticfiles.json").exists()
WHITENOISE_AUTOREFRESH = DEBUG
WHITENOISE_KEEP_ONLY_HASHED_FILES = True

# Where pages open their WebSockets: this port on the page's host (0: the page's own port).
EDT_LIVE_PORT = envint("EDT_LIVE_PORT", 0)

# Redis: Celery broker, Channels layer and live coordination state (protocol/keys.py).
REDIS_URL = envstr("REDIS_URL", "redis://127.0.0.1:6379/0")


def channel_layers(url: str) -> dict[str, Any]:
    """The Channels layer on Redis at ``url``. redis-py 8 reads with a 5 s socket timeout by
    default, which breaks the layer's blocking receive (BZPOPMIN): no timeout here."""
    return {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {
                "hosts": [{"address": url, "socket_timeout": None}],
                "capacity": 500,
                "expiry": 30,
            },
        },
    }


CHANNEL_LAYERS = channel_layers(REDIS_URL)

# Largest dataset archive accepted (bytes); checked as the upload streams in.
EDT_MAX_UPLOAD_BYTES = envint("EDT_MAX_UPLOAD_BYTES", 2 * 1024**3)
DATA_UPLOAD_MAX_MEMORY_SIZE = 16 * 1024**2
# Data roots on shared storage where datasets are registered in place, never copied
# (workers/dataroots.py): `FOLDER` or `FOLDER=TEAM|TEAM`, comma-separated.
EDT_DATA_ROOTS = envstr("EDT_DATA_ROOTS", "")  # one upload chunk (4 MiB) fits well within

# Celery reads sockets and TLS options its own way (edtweb/redis_urls.py).
_celery_redis = celery_options(REDIS_URL)
CELERY_BROKER_URL = _celery_redis["BROKER_URL"]
CELERY_RESULT_BACKEND = _celery_redis["RESULT_BACKEND"]
if "BROKER_USE_SSL" in _celery_redis:
    CELERY_BROKER_USE_SSL = _celery_redis["BROKER_USE_SSL"]
    CELERY_REDIS_BACKEND_USE_SSL = _celery_redis["REDIS_BACKEND_USE_SSL"]
CELERY_RESULT_EXPIRES = 3600
CELERY_TASK_DEFAULT_QUEUE = "edt.default"
# A learner task can run for hours: never redeliver it (docs/architecture.md, "Sources of truth").
CELERY_TASK_ACKS_LATE = False
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_WORKER_HIJACK_ROOT_LOGGER = False

# Slot liveness: a slot refreshes its heartbeat every EDT_HEARTBEAT_SECONDS; it is lost
# when none came for EDT_HEARTBEAT_TTL seconds.
EDT_HEARTBEAT_SECONDS = envint("EDT_HEARTBEAT_SECONDS", 2)
EDT_HEARTBEAT_TTL = envint("EDT_HEARTBEAT_TTL", 6)
# A job whose learners exit before joining this many times in a row, with no step trained
# in between, fails with the last one's error (each retry waits 1 s, doubling to 30 s).
EDT_START_FAILURES = envint("EDT_START_FAILURES", 5)
# Learner moves (docs/architecture.md, "Learner moves"): at most one per job per this many
# seconds, each made only where it pays back within them.
EDT_MOVE_INTERVAL = envint("EDT_MOVE_INTERVAL", 60)
# Idle jobs (docs/architecture.md, "Idle jobs"): a running job every slot of which stayed
# under EDT_IDLE_UTILISATION percent for EDT_IDLE_SECONDS (0: never) is flagged idle, and
# held at its minimum where its team's or resource group's rule says so.
EDT_IDLE_UTILISATION = envint("EDT_IDLE_UTILISATION", 10)
EDT_IDLE_SECONDS = envint("EDT_IDLE_SECONDS", 600)
# The scheduler's allocation policy (scheduler.policies.POLICIES): `edt_scheduler --policy`
# overrides it, `edt_run --policy` sets it for the scheduler it starts.
EDT_POLICY = envstr("EDT_POLICY", "fairshare")
# Sweeps: the Optuna storage of every sweep's study (samplers' and pruners' state, every
# trial's reported values), written by the active sweep driver alone (edtweb/sweeps/driver.py).
EDT_SWEEP_STORAGE = envstr("EDT_SWEEP_STORAGE", f"sqlite:///{EDT_DATA_DIR / 'sweeps.sqlite3'}")
# Each user's caps (edtweb/usercaps.py; 0: none): sweeps queued or running, a sweep's trials
# in flight over all of a user's sweeps, jobs of their own waiting in the queue.
EDT_USER_MAX_SWEEPS = envint("EDT_USER_MAX_SWEEPS", 20)
EDT_USER_MAX_TRIALS = envint("EDT_USER_MAX_TRIALS", 64)
EDT_USER_MAX_QUEUED_JOBS = envint("EDT_USER_MAX_QUEUED_JOBS", 500)
# A worker host serves its Prometheus metrics at /metrics on this port (0: not at all);
# `edt_worker --metrics-port` overrides it.
EDT_WORKER_METRICS_PORT = envint("EDT_WORKER_METRICS_PORT", 0)
# The web's /metrics asks for this bearer token when it is set (empty: it answers anyone
# who reaches the web, as /healthz and /readyz always do).
EDT_METRICS_TOKEN = envstr("EDT_METRICS_TOKEN", "")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "filters": {"orphaned_disconnect": {"()": "edtweb.logfilters.OrphanedDisconnectFilter"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": envstr("LOG_LEVEL", "INFO")},
    "loggers": {
        "django.channels.server": {"level": "WARNING"},
        # A request in flight when Daphne stops leaves a harmless orphaned-task traceback.
        "asyncio": {"filters": ["orphaned_disconnect"]},
    },
}

# The REST API (/api/v1/, edtweb/api/): token or session auth, errors as JSON.
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",  # first: 401 names the scheme
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    # JSON's depth judged before it is parsed (edtweb/api/parsers.py)
    "DEFAULT_PARSER_CLASSES": [
        "edtweb.api.parsers.BoundedJSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "edtweb.api.errors.exception_handler",
}

# The OpenAPI schema (/api/v1/schema/) and its Swagger UI (/api/v1/docs/), served offline.
SPECTACULAR_SETTINGS = {
    "TITLE": "EDT API",
    "DESCRIPTION": "Elastic distributed training: datasets, models, jobs, the cluster; and "
    "the WMLA-compatible subset under /platform/rest/deeplearning/v1/. See docs/api.md.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "edtweb.api.schema.document_auth_errors",
    ],
    "ENUM_NAME_OVERRIDES": {
        "JobStateEnum": "edtweb.training.models.Job.State",
        "WmlaStateEnum": "edtweb.api.serializers.WMLA_STATES",
    },
}
