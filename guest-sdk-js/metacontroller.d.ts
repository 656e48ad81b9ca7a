// Types of `@wasmpilot/guest/metacontroller`: run an existing Metacontroller hook unchanged.
import type { Context, FinalizerWorker, Inputs, PhaseWorker } from './index.js';

export declare const CHILDREN: 'children/';
export declare const RELATED: 'related/';

/** A Metacontroller hook: the request JSON in, the response JSON out. */
export type Hook = (request: HookRequest) => HookResponse;

export interface HookRequest {
  controller: { apiVersion: string; kind: string; metadata: { name: string } };
  parent: any;
  children: Record<string, Record<string, any>>;
  related: Record<string, Record<string, any>>;
  finalizing: boolean;
}

export interface HookResponse {
  status?: Record<string, unknown> | null;
  children?: any[] | null;
  resyncAfterSeconds?: number | null;
  finalized?: boolean;
}

export declare function hookRequest(ctx: Context, parent: any, inputs: Inputs, version: 'v1' | 'v2', finalizing: boolean): HookRequest;
export declare function syncWorker(hook: Hook, version?: 'v1' | 'v2'): new () => PhaseWorker;
export declare function finalizeWorker(hook: Hook, version?: 'v1' | 'v2'): new () => FinalizerWorker;
