"""Notification mail: how one is built (``compose``) and signed with DKIM (``dkim``), the
drain that sends it (``drain``), what a relay's failure means (``relay``) and the
one-click unsubscribe tokens in every mail (``tokens``). When a mail is due is a reader's
preference: :mod:`wikinotify.preferences.cadence`."""
