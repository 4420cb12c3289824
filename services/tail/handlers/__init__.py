"""The tail's HTTP handlers, one module per family of routes: each reads its
request's parameters, asks the read model (``readmodel``, its projections)
or the sequencer, and answers. ``service.py`` wires them into the app;
``routetable.py`` documents them."""
