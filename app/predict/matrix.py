"""A float32 feature matrix filled chunk by chunk, so building it costs the matrix plus one chunk.

Concatenating a list of chunks at the end needs the chunks and the result at once (twice the matrix);
`RowBuffer` writes each chunk into one preallocated array instead and, when the estimate was short,
grows it with `ndarray.resize`, which reallocates in place (glibc's realloc of a large block remaps its
pages with mremap rather than copying, so growing needs no second copy either). Pure.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

GROWTH = 1.5


class RowBuffer:
    """Rows of `columns` float32 values appended chunk by chunk; `finish` returns the filled matrix."""

    def __init__(self, columns: int, *, capacity: int = 0) -> None:
        self._data = np.empty((max(capacity, 1), columns), dtype=np.float32)
        self._rows = 0
        self._done = False

    def __len__(self) -> int:
        return self._rows

    @property
    def capacity(self) -> int:
        return int(self._data.shape[0])

    def append(self, chunk: npt.ArrayLike) -> None:
        if self._done:
            raise RuntimeError("the buffer was finished: its matrix has been handed out")
        block = np.asarray(chunk, dtype=np.float32)
        if block.ndim != 2 or block.shape[1] != self._data.shape[1]:
            raise ValueError(
                f"a chunk of shape {block.shape} does not fit rows of {self._data.shape[1]} columns"
            )
        end = self._rows + len(block)
        if end > self.capacity:
            self._resize(max(end, int(self.capacity * GROWTH) + 1))
        self._data[self._rows : end] = block
        self._rows = end

    def finish(self) -> npt.NDArray[np.float32]:
        """The matrix of the rows appended (trimmed in place); the buffer takes no more rows."""
        if not self._done:
            self._resize(self._rows)
            self._done = True
        return self._data

    def _resize(self, rows: int) -> None:
        # refcheck=False: no view of the array has been handed out before `finish`.
        self._data.resize((rows, self._data.shape[1]), refcheck=False)
