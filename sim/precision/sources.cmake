# Sources of the precision layer (formats, rounding, write-back, events, RNG).
