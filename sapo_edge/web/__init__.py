"""The projector page: the class view as a read-only web page served by `sapo-edge host`."""
