export interface OtherCrd {
  name: string;
  module: string;
  version: string;
  files: string[];
}
export const OTHER_CRDS: OtherCrd[];
export function kubeModuleDir(): string;
export function kubeCacheDir(): string;
