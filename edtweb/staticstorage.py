"""Static files as WhiteNoise serves them once collected: hashed names, compressed copies."""

from __future__ import annotations

from whitenoise.storage import CompressedManifestStaticFilesStorage


class CompressedStaticStorage(CompressedManifestStaticFilesStorage):
    """WhiteNoise's compressed manifest storage that, for a file not collected (tests, or a
    checkout where `collectstatic` has not run yet), links its plain name instead of
    failing the page; WhiteNoise then serves it from the source folders."""

    manifest_strict = False

    def stored_name(self, name: str) -> str:
        try:
            return str(super().stored_name(name))
        except ValueError:
            return name
