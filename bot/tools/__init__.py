"""The operator's tools around the product: ``digestbot demo`` (the whole product on
embedded defaults), ``digestbot init`` (an editable copy of the shipped files) and the
local SMTP server of the demo and the tests (``digestbot sink``).  Never part of a
production pass: nothing in the pipeline imports them."""
