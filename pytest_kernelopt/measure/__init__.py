"""Measuring: paired GPU timings (:mod:`.timing`), the statistics behind every ratio (:mod:`.stats`), device time by kernel (:mod:`.profile`)."""
