"""A range query's JSON body decoded straight into columns (`range_answers.Samples`).

A scoring cycle at 80,000 GPUs receives ~2.5 million series. Parsed as plain JSON, every sample is a list
of an int and a str, converted to floats afterwards: 0.7 s and ~240 MB of Python objects for one 12-point
answer, and the objects left the allocator's heap fragmented between cycles (docs/benchmarks.md). Here
msgspec decodes the envelope and each series' labels, keeps the samples as raw JSON, and decodes those a
batch of series at a time into `(float, float)` pairs (its lax mode reads Prometheus' strings as numbers:
"NaN", "Inf", "-Inf"), which numpy takes over. No more than one batch's pairs exist as objects at once.

Values read exactly as `float()` reads them, with one exception, `-0`, which reads as 0 (equal as floats).
Whatever msgspec's typed decoding refuses (a value `float()` reads and msgspec does not, like " 3.5 " or
"1_000"; labels that are not strings; a null) is read again the plain way (`range_answers.samples`), which
defines the result; an answer that is not a Prometheus matrix is `range_answers.Malformed`.
"""

from __future__ import annotations

from itertools import chain

import msgspec
import numpy as np

from app.predict.range_answers import GpuNames, Malformed, Samples, samples

# Series decoded into pair objects at once: big enough that a batch costs no more per series than one
# decode of everything, small enough that a 12-point batch's pairs are ~6 MB.
BATCH = 4096


class _Series(msgspec.Struct):
    metric: GpuNames = GpuNames()
    values: msgspec.Raw = msgspec.Raw(b"[]")


class _Data(msgspec.Struct):
    resultType: str = "matrix"
    result: list[_Series] = []


class _Answer(msgspec.Struct):
    status: str
    data: _Data | None = None
    error: str = ""


_ANSWER = msgspec.json.Decoder(_Answer)
_PAIRS = msgspec.json.Decoder(list[list[tuple[float, float]]], strict=False)


def decode(body: bytes) -> Samples:
    """The body of a successful `/api/v1/query_range` as columns, or `Malformed`."""
    try:
        answer = _ANSWER.decode(body)
    except msgspec.ValidationError:
        return _plainly(body)
    except msgspec.DecodeError as exc:
        raise Malformed(f"the answer is not JSON: {exc}") from exc
    if answer.status != "success":
        raise Malformed(f"Prometheus answered {answer.status!r}: {answer.error or 'no error given'}")
    if answer.data is None or answer.data.resultType != "matrix":
        raise Malformed("the answer is not a range query's matrix")
    series = answer.data.result
    counts: list[int] = []
    flats = []
    try:
        for first in range(0, len(series), BATCH):
            chunk = b"".join((b"[", b",".join(one.values for one in series[first : first + BATCH]), b"]"))
            if b"+Inf" in chunk:  # Go's spelling, which msgspec does not read; only values are in `chunk`
                chunk = chunk.replace(b'"+Inf"', b'"Inf"')
            pairs = _PAIRS.decode(chunk)
            counts.extend(len(one) for one in pairs)
            flats.append(np.fromiter(chain.from_iterable(chain.from_iterable(pairs)), dtype=np.float64))
            del pairs
    except msgspec.ValidationError:
        return _plainly(body)
    except msgspec.DecodeError as exc:
        raise Malformed(f"the answer is not JSON: {exc}") from exc
    flat = np.concatenate([np.zeros(0), *flats])
    return Samples(
        labels=[one.metric for one in series],
        counts=np.array(counts, dtype=np.int64),
        times=flat[0::2],
        values=flat[1::2],
    )


def _plainly(body: bytes) -> Samples:
    """The answer parsed as plain JSON: what defines every value (`range_answers.samples`)."""
    try:
        answer = msgspec.json.decode(body)
    except msgspec.DecodeError as exc:
        raise Malformed(f"the answer is not JSON: {exc}") from exc
    data = answer.get("data") if isinstance(answer, dict) else None
    if not isinstance(data, dict) or answer.get("status") != "success":
        raise Malformed("the answer is not a successful Prometheus answer")
    if data.get("resultType", "matrix") != "matrix" or not isinstance(data.get("result"), list):
        raise Malformed("the answer is not a range query's matrix")
    return samples(data["result"])
