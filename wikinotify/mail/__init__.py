"""Notification mail: when it is due (``cadence``), how one is built (``compose``) and
signed (``signing``), the drain that sends it (``drain``), what a relay's failure means
(``relay``) and the one-click unsubscribe tokens in every mail (``tokens``)."""
