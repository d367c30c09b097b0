import json,sys,glob,os
for v in sorted(glob.glob(sys.argv[1]+"/*/")):
    try:
        r=json.load(open(v+"report/report.json"))
    except Exception as e:
        print(os.path.basename(v[:-1]),"no report yet"); continue
    tr=r["reproducibility"]["train_result"]; c=tr.get("clipping") or {}
    pf=c.get("per_step",{}).get("fraction_clipped",[]); pm=c.get("per_step",{}).get("median_norm",[])
    k=max(1,len(pf)//6)
    m=r["metrics"]; acc=m.get("accuracy"); b=(m.get("base_model") or {}).get("accuracy")
    print(os.path.basename(v[:-1]), "acc=%.3f"%acc, "base=%s"%b, "sigma=%s"%tr["noise_multiplier"], "steps=%d"%tr["steps"], "loss=%.3f"%tr["final_loss"],
     "meanclip=",c.get("mean_fraction_clipped"), "frac=",pf[::k], "med=",pm[::k], "s=%.0f"%tr["seconds"])
