/**
 * The kernel's entry point for the rest of keycap: starting it (`keycap serve kernel`), and
 * the two pieces of its state the CLI's `keys rotate --reload` works with on the same data
 * directory (the signing keys and the running kernel's pid file).
 */
export { startKernel } from "./main";
export { readKernelPidFile, type KernelPidFile } from "./pid-file";
export { rotateSigningKeys } from "./signing-keys";
