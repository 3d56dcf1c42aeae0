// The kinds of deployments and model servers: plain string unions shared by the gateway and the client library (this
// file must stay free of Node.js types, so that `servegate/client`'s declarations type-check anywhere).
export type DeploymentType = 'model' | 'python';
export type ModelServer = 'python' | 'sklearn' | 'tensorflow' | 'llm';
/** How the gateway treats a route: which suffixes it accepts and which error dialect it speaks. */
export type RouteKind = 'predictive' | 'llm' | 'python';
