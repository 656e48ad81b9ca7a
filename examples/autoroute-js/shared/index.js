// The AutoRoute custom resource, and what the Syncing and Ready workers share: which of the
// selected Deployments get a route, and the routes (Service, VirtualService, Gateway) themselves.
// A port of examples/autoroute/types (Rust); the two must decide the same.
export { AutoRoute, Deployment } from './resource.js';
export { deploymentNames, firstContainerPort, routableDeployments } from './routable.js';
export { desiredRoutes, hostname, routeDifferences } from './routes.js';
