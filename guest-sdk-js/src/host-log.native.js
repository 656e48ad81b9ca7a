// The host's `log` import where there is no host (node, tests): none. The Context then keeps
// log records for the test and prints them to stderr.
export const hostLog = null;
