// testops holds operators that exercise parts of the AssemblyScript SDK the
// other examples do not use, for its tests: "config" reads its
// configuration with every config helper and emits what it read when it
// closes, "iter" lists map state with the iterator's views. No plan.

import {
  Operator, Context, Record, MapState, Bytes, register, str,
} from "../../../../guest-sdk/assemblyscript/assembly/index";
export * from "../../../../guest-sdk/assemblyscript/assembly/exports";

/**
 * Config emits, when it closes, key = its config and value =
 * "n=N s=S b=XY": N the integer member n (12345 when absent), S the string
 * member s ("-" when absent), X and Y the boolean member b read with the
 * defaults false and true (so "01" when absent).
 */
class Config extends Operator {
  out: Bytes = new Bytes();

  open(ctx: Context): void {
    const n = ctx.configInt("n", 12345);
    const s = ctx.configStr("s", "-");
    const b0 = ctx.configBool("b", false);
    const b1 = ctx.configBool("b", true);
    this.out.reset().string("n=").i64(n).string(" s=").string(s).string(" b=")
      .byte(b0 ? 0x31 : 0x30).byte(b1 ? 0x31 : 0x30);
  }

  process(ctx: Context, r: Record): void {}

  close(ctx: Context): void {
    ctx.emit(ctx.config, this.out, 0);
  }
}

/**
 * Iter keeps map state "m": a record "put K V" stores K=V for the record's
 * key, "list P" emits every entry whose map key starts with P (one record
 * per entry, key = map key, value = value), "sum" emits the sum of the
 * values as int64 ("add K N" stores them).
 */
class Iter extends Operator {
  m!: MapState;

  open(ctx: Context): void {
    this.m = ctx.mapState("m");
  }

  process(ctx: Context, r: Record): void {
    const cmd = r.valueString();
    const parts = cmd.split(" ");
    if (parts[0] == "put" && parts.length == 3) {
      this.m.put(parts[1], parts[2]);
    } else if (parts[0] == "add" && parts.length == 3) {
      this.m.putI64(parts[1], I64.parseInt(parts[2]));
    } else if (parts[0] == "get" && parts.length == 2) {
      const v = this.m.getString(parts[1]);
      ctx.emit(parts[1], v !== null ? v : "<absent>", r.timestamp);
    } else if (parts[0] == "list" && parts.length == 2) {
      const it = this.m.iter(parts[1]);
      while (it.next()) ctx.emit(it.keyString(), it.value, r.timestamp);
    } else if (parts[0] == "sum" && parts.length == 1) {
      let sum: i64 = 0;
      const it = this.m.entries();
      while (it.next() && !ctx.failed) sum += it.valueI64();
      if (!ctx.failed) ctx.emit(r.key, sum.toString(), r.timestamp);
    } else {
      ctx.fail("unknown command " + str(r.value));
    }
  }
}

register("config", (): Operator => new Config());
register("iter", (): Operator => new Iter());
