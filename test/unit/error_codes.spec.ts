import { status } from "@grpc/grpc-js";
import { expect } from "chai";
import { Code } from "../../services/common/src/errors";

describe("domain error codes", () => {
  it("are gRPC's status numbers, so the one mapping layer passes them through", () => {
    for (const [name, value] of Object.entries(Code)) expect(value, name).to.equal(status[name as keyof typeof status]);
  });
});
