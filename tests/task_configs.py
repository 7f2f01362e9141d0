"""Task settings shared by the tests: the one-digit addition the offline demo uses."""

from sapo_edge.data.tasks import ONE_DIGIT_ADDITION as ONE_DIGIT_ADD  # noqa: F401
