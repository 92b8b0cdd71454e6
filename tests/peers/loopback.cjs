// Node preload (`node -r tests/peers/loopback.cjs ...`, or NODE_OPTIONS="-r <abs path>") that forces
// every net.Server.listen() call that names no host onto 127.0.0.1.
//
// server-everything's HTTP transports call `app.listen(PORT)`, which binds all interfaces; the test
// peers must only ever listen on loopback. Unix-socket / handle listens and calls that already pass a
// host are left alone.
'use strict';
const net = require('net');

const LOOPBACK = '127.0.0.1';
const originalListen = net.Server.prototype.listen;

function isPort(v) {
  return (typeof v === 'number' && Number.isInteger(v)) || (typeof v === 'string' && /^\d+$/.test(v));
}

net.Server.prototype.listen = function loopbackListen(...args) {
  const first = args[0];
  if (args.length === 0 || typeof first === 'function' || first === undefined || first === null) {
    // listen() / listen(cb): an ephemeral port on all interfaces -> ephemeral port on loopback.
    args.splice(0, first === undefined || first === null ? 1 : 0, 0, LOOPBACK);
  } else if (isPort(first)) {
    // listen(port[, host][, backlog][, cb]): insert the host unless one is given.
    if (typeof args[1] !== 'string') args.splice(1, 0, LOOPBACK);
  } else if (typeof first === 'object' && first.path === undefined && first.fd === undefined &&
             first._handle === undefined && first.handle === undefined && !first.host) {
    // listen({port, ...}[, cb])
    args[0] = { ...first, host: LOOPBACK };
  }
  return originalListen.apply(this, args);
};
