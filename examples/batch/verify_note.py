# The checked end state of one item: the note the item wrote is really on the customer's record.
# Runs read-only (any call that may write is refused); INPUT is the item, RESULT what it returned.
from servers.crm import get_customer

if RESULT["customer"] is None:
    result = True  # nothing to write for a transcript that names no customer
else:
    notes = [n["text"] for n in get_customer(customer_id=RESULT["customer"])["notes"]]
    result = RESULT["note"] in notes
result
