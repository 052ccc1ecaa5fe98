"""Push: the deliverer sends task status changes to their callbacks, signed and retried.

The store writes a delivery for each change a callback wants, in the change's
transaction; :class:`Deliverer` (:mod:`~queuestore.push.deliverer`) takes the
due ones, signs each (:mod:`~queuestore.push.signing`) and POSTs it to an
address the URL policy accepts (:mod:`~queuestore.push.sender`).
It imports the store and the core.
"""

from queuestore.push.deliverer import Deliverer, DeliveryPolicy
from queuestore.push.signing import SigningSecret

__all__ = ["Deliverer", "DeliveryPolicy", "SigningSecret"]
