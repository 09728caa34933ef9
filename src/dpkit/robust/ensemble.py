"""An ensemble of base classifiers as one base classifier for :class:`dpkit.robust.Smoothed`.

Randomized smoothing certifies ``g(x) = argmax_c P(f(x + N(0, sigma² I)) = c)`` for *any*
deterministic base classifier ``f``. The certified radius grows with ``pA``, the probability
that ``f`` is right under noise, so a base classifier with less variance under noise certifies
more: Horváth, Mueller, Fischer & Vechev (ICLR 2022, "Boosting randomized smoothing with
variance reduced classifiers") average the outputs of several independently trained members.

:class:`Ensemble` is such an ``f``: ``k`` members (numpy callables or torch modules, each
mapping a batch ``(b, *shape)`` to scores ``(b, num_classes)``) combined by

* ``"softmax"``: the mean of the members' softmax probabilities (``temperature`` divides
  the scores first), the rule Horváth et al. use;
* ``"logits"``: the mean of the members' scores as they are (members that already return
  probabilities are averaged as probabilities);
* ``"vote"``: each member's argmax votes, ties to the lowest class (members may then return
  labels ``(b,)`` too).

With ``consensus=K`` (Horváth et al.'s K-consensus), the first ``K`` members are run first and,
on the rows where their argmaxes all agree, that class is the answer; only the other rows run
the remaining members and take the combined rule's argmax. The output is then labels ``(b,)``.

Why the certificate stays sound (Cohen et al.'s Theorem 1 needs only that ``f`` be a fixed
function of one input): each member is a fixed function of its row (a net in eval mode has no
dependence on the other rows of the batch, no dropout, no running statistics), so whether the
first ``K`` agree on a row, and the answer on that row, depend on that row only. K-consensus is
therefore *another* deterministic base classifier, not an approximation of the full ensemble
whose error would have to be accounted for: ``Smoothed`` certifies the smoothed version of this
classifier, and the certificate says nothing about the full ensemble's smoothed classifier.
(Floating-point kernels may round a row's scores differently in batches of different sizes,
by ~1e-7 relative; that moves a label only at an exact tie, as for any torch classifier.)

>>> import numpy as np
>>> a = lambda b: np.stack([-b[:, 0], b[:, 0]], axis=1)          # class 1 where x[0] > 0
>>> c = lambda b: np.stack([-b[:, 0] - 1.0, b[:, 0] + 1.0], axis=1)  # class 1 where x[0] > -1
>>> f = Ensemble([a, c], num_classes=2)
>>> f(np.array([[-2.0, 0.0], [-0.2, 0.0], [0.5, 0.0]])).argmax(axis=1).tolist()
[0, 1, 1]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from dpkit.robust.smoothing import as_batch_function

COMBINES = ("softmax", "logits", "vote")


def _softmax(scores: np.ndarray, temperature: float) -> np.ndarray:
    z = scores / temperature
    z = z - z.max(axis=1, keepdims=True)  # no overflow in exp
    e = np.exp(z)
    out: np.ndarray = e / e.sum(axis=1, keepdims=True)
    return out


class Ensemble:
    """Several base classifiers as one deterministic base classifier (see the module docstring).

    ``members``: numpy callables or torch modules (call ``.eval()`` first), each returning
    scores ``(b, num_classes)`` for a batch of ``b`` inputs (``combine="vote"`` also accepts
    labels ``(b,)``). Calling the ensemble returns combined scores ``(b, num_classes)``, or
    labels ``(b,)`` with ``consensus``. A member that returns another shape is refused with
    its index, on the first call; :meth:`Smoothed.certify` makes that call on the noise-free
    input, so the error comes before any noise is drawn. No randomness is drawn here and no
    privacy is claimed: this is a classifier, the guarantee is :class:`Smoothed`'s.
    """

    def __init__(self, members: Sequence[Callable[[np.ndarray], Any] | Any], *,
                 num_classes: int, combine: str = "softmax", temperature: float = 1.0,
                 consensus: int = 0) -> None:
        if isinstance(members, (str, bytes)) or len(members) < 1:
            raise ValueError("members must be a non-empty sequence of classifiers")
        if isinstance(num_classes, bool) or int(num_classes) != num_classes or num_classes < 2:
            raise ValueError(f"num_classes must be an integer >= 2 (got {num_classes!r})")
        if combine not in COMBINES:
            raise ValueError(f"combine must be one of {COMBINES} (got {combine!r})")
        if not (np.isfinite(temperature) and temperature > 0):
            raise ValueError(f"temperature must be a finite number > 0 (got {temperature!r})")
        if isinstance(consensus, bool) or int(consensus) != consensus or \
                not 0 <= consensus <= len(members):
            raise ValueError(f"consensus must be an integer in [0, {len(members)}], the number "
                             f"of members that must agree for an early answer "
                             f"(0: off; got {consensus!r})")
        self._calls = [as_batch_function(m) for m in members]
        self.num_classes = int(num_classes)
        self.combine = combine
        self.temperature = float(temperature)
        self.consensus = int(consensus)
        self._checked = False  # every member's output shape, once, even when K agree

    def __len__(self) -> int:
        return len(self._calls)

    def __repr__(self) -> str:
        return (f"Ensemble({len(self)} members, combine={self.combine!r}, "
                f"consensus={self.consensus})")

    def member_output(self, i: int, batch: np.ndarray) -> np.ndarray:
        """Member ``i`` on ``batch``, checked: scores ``(b, num_classes)`` (or labels for votes),
        as float64 scores or int64 labels."""
        out = np.asarray(self._calls[i](batch))
        b, c = batch.shape[0], self.num_classes
        if out.shape == (b, c) and np.issubdtype(out.dtype, np.number):
            if not np.all(np.isfinite(out)):
                raise ValueError(f"ensemble member {i} returned non-finite scores")
            return out.astype(np.float64, copy=False)
        if self.combine == "vote" and out.shape == (b,) and np.issubdtype(out.dtype, np.integer):
            if out.size and (out.min() < 0 or out.max() >= c):
                raise ValueError(f"ensemble member {i} returned labels outside [0, {c})")
            return out.astype(np.int64, copy=False)
        wanted = f"scores ({b}, {c})" + (f" or labels ({b},)" if self.combine == "vote" else "")
        raise ValueError(f"ensemble member {i} returned shape {out.shape} for a batch of {b}: "
                         f"it must return {wanted} (num_classes={c})")

    def _combined(self, outs: list[np.ndarray]) -> np.ndarray:
        b, c = outs[0].shape[0], self.num_classes
        if self.combine == "vote":
            votes = np.zeros((b, c))
            rows = np.arange(b)
            for out in outs:
                labels = out if out.ndim == 1 else np.argmax(out, axis=1)
                votes[rows, labels] += 1.0
            return votes
        if self.combine == "logits":
            return np.mean(outs, axis=0)
        return np.mean([_softmax(o, self.temperature) for o in outs], axis=0)

    def __call__(self, batch: np.ndarray) -> np.ndarray:
        if not self.consensus:
            return self._combined([self.member_output(i, batch) for i in range(len(self))])
        if not self._checked and len(batch):
            for i in range(self.consensus, len(self)):
                self.member_output(i, batch[:1])
            self._checked = True
        first = [self.member_output(i, batch) for i in range(self.consensus)]
        labels = [o if o.ndim == 1 else np.argmax(o, axis=1) for o in first]
        answer = labels[0].astype(np.int64)
        split = np.zeros(len(batch), dtype=bool)
        for other in labels[1:]:
            split |= other != answer
        if split.any() and self.consensus < len(self):
            rest = batch[split]
            outs = [o[split] for o in first]
            outs += [self.member_output(i, rest) for i in range(self.consensus, len(self))]
            answer[split] = np.argmax(self._combined(outs), axis=1)
        elif split.any():  # every member was among the first K: the full rule on those rows
            answer[split] = np.argmax(self._combined([o[split] for o in first]), axis=1)
        return answer
