"""keycap_client.reasons, generated from proto/keycap/rules/v1/reasons.proto (make generate):
every reason of the proto catalogue with the code it states, and the real services'
refusals are the catalogue's."""

from __future__ import annotations

import json
from typing import Any

import grpc
import pytest

from keycap_client import KernelClient, KeycapError, LedgerClient, reasons
from keycap_client._gen.keycap.rules.v1 import reasons_pb2
from keycap_client.sink import REASON_CODES as SINK_REASON_CODES
from test_e2e import charge_args, charge_tool, other_key

_BY_NUMBER = {code.value[0]: code for code in grpc.StatusCode}


def _code(value: Any) -> grpc.StatusCode:
    """The ``(keycap.rules.v1.code)`` option of a Reason value, as a status code."""
    return _BY_NUMBER[value.GetOptions().Extensions[reasons_pb2.code]]


def test_the_generated_catalogue_is_the_protos() -> None:
    values = reasons_pb2.DESCRIPTOR.enum_types_by_name["Reason"].values
    proto = {v.name.removeprefix("REASON_"): _code(v) for v in values if v.number != 0}
    assert dict(reasons.CODES) == proto
    assert list(reasons.CODES) == list(proto)  # in the proto's order
    for name in proto:
        assert getattr(reasons, name) == name
    assert sorted(reasons.__all__) == sorted(["CODES", *proto])


def test_the_sinks_reasons_are_the_catalogues_with_its_codes() -> None:
    assert SINK_REASON_CODES == {r: reasons.CODES[r] for r in SINK_REASON_CODES}


@pytest.mark.parametrize("key", ["forged", None], ids=["another key", "no capability"])
def test_a_refusal_of_the_real_ledger_is_the_catalogues_reason_and_code(
    kernel: KernelClient, ledger: LedgerClient, tool_id: str, key: str | None
) -> None:
    kernel.register_tool(charge_tool(tool_id))
    begun = kernel.begin_call(tool_id, json.dumps(charge_args()))
    with pytest.raises(KeycapError) as caught:
        if key is None:
            ledger.write_with_capability(None, key=begun.call.key, payload=b"{}")
        else:
            ledger.write_with_capability(begun.capability, key=other_key(begun.call.key), payload=b"{}")
    err = caught.value
    assert err.reason == (reasons.KEY_MISMATCH if key else reasons.CAPABILITY_MISSING)
    assert err.code == reasons.CODES[err.reason]
