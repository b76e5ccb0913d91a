"""In-memory fakes for the supervision tests: fake upstream servers behind the actor's
``open_link`` seam (`links`) and a small tree to run them in (`harness`)."""
