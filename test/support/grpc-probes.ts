import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import * as path from "node:path";

const HEALTH_PROTO = path.resolve(process.cwd(), "node_modules/grpc-health-check/proto/health/v1/health.proto");
const REFLECTION_PROTO = path.resolve(process.cwd(), "node_modules/@grpc/reflection/build/proto/grpc/reflection/v1/reflection.proto");

type Loaded = Record<string, unknown>;
function load(file: string): Loaded {
  return grpc.loadPackageDefinition(protoLoader.loadSync(file, { keepCase: true, enums: String })) as unknown as Loaded;
}

function dig(obj: Loaded, dotted: string): grpc.ServiceClientConstructor {
  return dotted.split(".").reduce<unknown>((o, k) => (o as Loaded)[k], obj) as grpc.ServiceClientConstructor;
}

/** Asks grpc.health.v1.Health/Check; resolves with the status name. */
export function healthCheck(address: string, service = ""): Promise<string> {
  const Health = dig(load(HEALTH_PROTO), "grpc.health.v1.Health");
  const client = new Health(address, grpc.credentials.createInsecure());
  return new Promise((resolve, reject) => {
    client["Check"]!({ service }, { deadline: Date.now() + 5000 }, (err: grpc.ServiceError | null, res: { status: string }) => {
      client.close();
      if (err) reject(err);
      else resolve(res.status);
    });
  });
}

/** Lists services through grpc.reflection.v1 (what grpcurl does). */
export function reflectServices(address: string): Promise<string[]> {
  const Reflection = dig(load(REFLECTION_PROTO), "grpc.reflection.v1.ServerReflection");
  const client = new Reflection(address, grpc.credentials.createInsecure());
  return new Promise((resolve, reject) => {
    const call = client["ServerReflectionInfo"]!({ deadline: Date.now() + 5000 }) as grpc.ClientDuplexStream<
      unknown,
      { list_services_response?: { service: { name: string }[] } }
    >;
    call.on("data", (res) => {
      resolve((res.list_services_response?.service ?? []).map((s: { name: string }) => s.name));
      call.end();
      client.close();
    });
    call.on("error", (err) => {
      client.close();
      reject(err);
    });
    call.write({ list_services: "*" });
  });
}
