"""The in-app channel's worker side (docs/rules.md#claiming-events): from an outbox event to one
inbox entry per person told.

For every category an event reaches, highest priority first, candidates come in keyset
batches; the actor and accounts that never receive anything are dropped, access is checked
once per distinct group set, preferences decide the channels, a person already given an
entry by a higher-priority category is skipped (docs/rules.md#one-entry-per-person-per-event), and
each batch's rows are upserted with the coalescing rules of docs/rules.md#coalescing-is-idempotency,
by a :class:`~.batch_writer.BatchWriter` (while the next batch is decided, where the database
allows: PostgreSQL, a SQLite file in WAL mode), with the
cursor that covers them. A run that nears its time budget stores its cursor on the event and hands
the rest to the next run (docs/rules.md#long-fan-outs). An event with a large audience is split into
ranges that several workers fan out at once.

One module per role:

- :mod:`.claims`: claiming events and ranges under a lease, and handing claims back.
- :mod:`.events`: a dispatch run over the claimed events, and one event's fan-out.
- :mod:`.ranges`: splitting an event's audience into ranges, and one range's fan-out.
- :mod:`.walk`: the one loop both fan-outs run, a category's candidates batch by batch.
- :mod:`.run`: what one event's fan-out keeps while it runs.
- :mod:`.audience`: who is told, on which channels.
- :mod:`.rows`: the rows an event's entry makes.
- :mod:`.upsert`: the coalescing upsert that writes them, for both dialects.
- :mod:`.batch_writer`: writing a batch on a thread while the next is decided.
- :mod:`.failures`: a failed attempt's back-off, and dead letters.
"""
