"""What the golden-value scripts of this folder share."""
import math


def number(x):
    """A float for JSON, which has no NaN or infinities: "nan", "inf" and "-inf"."""
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x
