"""Cinder volume driver that stores nothing in Cinder itself.

A volume's bytes live in the ground agent's backing file (one per volume id),
attached as a loop device to the target host of the server that uses it.
Cinder's own fake driver would copy images with qemu-img under sudo/privsep;
here image -> volume is an instant "clone" and volume -> image uploads a
small placeholder.
"""

import io

from cinder.tests import fake_driver


class NoStorageDriver(fake_driver.FakeLoggingVolumeDriver):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # the parent hard-codes "fake"; one backend per pool needs its own name
        self.backend_name = self.configuration.safe_get("volume_backend_name") or "ground"

    def clone_image(self, context, volume, image_location, image_meta, image_service):
        self.create_volume(volume)
        return {}, True

    def copy_image_to_volume(self, context, volume, image_service, image_id, disable_sparse=False):
        return None

    def copy_volume_to_image(self, context, volume, image_service, image_meta):
        image_service.update(context, image_meta["id"], {}, io.BytesIO(b"\0" * 4096))

    def extend_volume(self, volume, new_size):
        return None
