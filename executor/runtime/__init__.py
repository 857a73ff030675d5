"""The Spark runtime: start-up flags, the background warm-up, JVM look-ups, phase timing."""
