// nni-hwaware: servers given only a port listen on 127.0.0.1, not on every interface.
// Loaded into NNI's manager with NODE_OPTIONS="--require <this file>"; see
// nni_hwaware/experiment/portal.py.
const net = require('net');
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  const a = args[0];
  const portOnly = typeof a === 'number' || (typeof a === 'string' && /^\d+$/.test(a));
  if (portOnly && (args.length === 1 || typeof args[1] === 'function')) {
    args.splice(1, 0, '127.0.0.1');
  } else if (a !== null && typeof a === 'object' && !('path' in a) && !a.host) {
    args[0] = { ...a, host: '127.0.0.1' };
  }
  return listen.apply(this, args);
};
