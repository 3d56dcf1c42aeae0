// The package's main entry, `import … from 'servegate'`: run the gateway inside your own Node.js process (a route
// source of your choice, your logger, your ports), build route tables, mint API keys. The client library is the
// separate entry `servegate/client`, which pulls in none of this.
export { startServegate, type ServeOptions, type Servegate } from './server.js';
export { ConfigError, loadConfigFile, parseConfig, ownNamespace, type RuntimeDefaults } from './config/load.js';
export type { Config, ConfigInput } from './config/schema.js';
export { FilesSource, type FilesSourceOptions } from './sources/files/index.js';
export { KubernetesSource, type KubernetesSourceOptions } from './sources/kubernetes/index.js';
export type { EndpointResolver, RouteSource, SourceHealth } from './sources/types.js';
export { buildRouteTable } from './routing/build.js';
export { RouteStore } from './routing/store.js';
export type {
  ApiKeyRecord,
  BuildOptions,
  BuildResult,
  DeploymentStatus,
  Route,
  RouteTable,
  Snapshot,
} from './routing/types.js';
export { generateKey, hashKey, type GeneratedKey } from './keys/index.js';
export { createLogger, type Logger } from './log.js';
