"""The operator's garbage collector: what start-up built is frozen, young collections are spaced."""
import gc

from tfop.runtime.main import YOUNG_COLLECTION_ALLOCATIONS, tune_garbage_collector


def test_start_up_objects_are_frozen_and_young_collections_spaced():
    before = gc.get_threshold()
    try:
        tune_garbage_collector()
        assert gc.get_freeze_count() > 1000  # the modules imported so far, at least
        assert gc.get_threshold() == (YOUNG_COLLECTION_ALLOCATIONS, *before[1:])
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
