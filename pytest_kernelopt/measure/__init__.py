"""Measuring: paired GPU timings (:mod:`.timing`) and the statistics behind every ratio (:mod:`.stats`)."""
