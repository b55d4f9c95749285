/**
 * Where the ledger's verifier gets the kernel's public keys, by kid: fetched from the kernel
 * and cached ({@link RemoteJwksSource} over {@link KernelJwksFetcher}), or read from a file
 * once ({@link FileJwksSource}). Both accept only public Ed25519 keys ({@link parseJwks}).
 */
export { FileJwksSource } from "./file-jwks-source";
export { JwksError, parseJwks } from "./jwks";
export { KernelJwksFetcher } from "./kernel-jwks-fetcher";
export type { PublicKeySource } from "./public-key-source";
export { RemoteJwksSource, type RemoteJwksSourceOptions } from "./remote-jwks-source";
