/* After a drain or resume: the node's part again every 2 s (common.js's renew, which swaps it
   in), until its state, timeline and outages have stayed the same for four rounds (at most a
   minute). */
(function () {
  "use strict";
  let generation = 0;
  function digest(root) {
    const text = (sel) => { const el = root.querySelector(sel); return el ? el.textContent : ""; };
    return [text("#node-state"), text("#node-reason"), root.querySelectorAll("#timeline-table tbody tr").length,
            text("#timeline-repairs"), root.querySelectorAll("#timeline-outages [data-ongoing]").length].join("|");
  }
  document.addEventListener("slurmtower:acted", () => {
    const mine = ++generation;
    let round = 0, same = 0, last = null;
    async function poll() {
      if (mine !== generation) { return; }  /* a newer action polls now */
      round += 1;
      await window.slurmtowerRenew();
      const key = digest(document);
      same = key === last ? same + 1 : 0;
      last = key;
      if (same < 4 && round < 30) { setTimeout(poll, 2000); }
    }
    setTimeout(poll, 800);
  });
}());
