"""A thumbnailer that makes none: the shop's products have no pictures (Oscar shows its
placeholder), and Oscar's default needs ``sorl.thumbnail``, which the shop does not install."""

from oscar.core.thumbnails import AbstractThumbnailer


class NoThumbnails(AbstractThumbnailer):
    def generate_thumbnail(self, source, **opts):
        return source  # the picture itself (its ``url``)

    def delete_thumbnails(self, source):
        return None
